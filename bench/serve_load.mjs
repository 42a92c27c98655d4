// Load test of `refit serve`: concurrent clients on loopback while the weights are refit
// from disk every few seconds.
//
//   node bench/serve_load.mjs REFIT_BINARY [--preset small] [--clients 32] [--duration 60]
//        [--refit-every 5] [--max-tokens 32] [--sequential 30] [--work DIR] [--env K=V]
//
// Writes two synthetic checkpoints (seeds 0 and 1) unless --work already holds them,
// starts the server, and records for each greedy prompt its single-request answer on
// either checkpoint. Then `clients` clients (every fourth streams) send requests in a loop
// for `duration` seconds while a refitter alternates the weights between the two
// checkpoints. Every response must be well-formed, report one weight version for all its
// tokens, and carry exactly the tokens of the single-request answer at that version (the
// engine is batch-invariant, so this is an exact check). Finally one client alone, with no
// refits, measures one-request-at-a-time throughput. Prints a JSON summary.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { complete as completeAt, option, percentile, post as postAt, prompts, sameArray, serverEnv, startServer,
         syntheticPair } from "./serve_harness.mjs";

const args = process.argv.slice(2);
const refit = args[0];
const opt = (name, def) => option(args, name, def);
const preset = opt("preset", "small");
const clients = Number(opt("clients", 32));
const duration = Number(opt("duration", 60));
const refitEvery = Number(opt("refit-every", 5));
const maxTokens = Number(opt("max-tokens", 32));
const sequentialSeconds = Number(opt("sequential", 30));
const work = opt("work", fs.mkdtempSync(path.join(os.tmpdir(), "refit-load-")));
const env = serverEnv(args);

const models = syntheticPair(refit, preset, work);
const { server, base } = await startServer(refit, models.A, env);
const post = (route, body) => postAt(base, route, body);
const complete = (i, stream) => completeAt(base, i, stream, maxTokens);

// References: each prompt alone on each checkpoint.
const reference = { A: [], B: [] };
let refitCount = 0;
const refitTo = async (key) => {
  const label = `${key}-${refitCount++}`;
  const t0 = performance.now();
  const r = await post("/update_weights_from_disk", { model_path: models[key], weight_version: label });
  const j = JSON.parse(r.text);
  if (!j.success) throw new Error(`refit to ${key} failed: ${j.message}`);
  return { label, ms: performance.now() - t0 };
};
for (const key of ["A", "B"]) {
  await refitTo(key);
  for (let i = 0; i < prompts.length; i++) reference[key].push(await complete(i, false));
}
await refitTo("A");


// Phase 1: concurrent load with refits.
const failures = [], latencies = [], refits = [], versionsSeen = new Set();
let tokensDone = 0, requestsDone = 0, mismatches = 0;
const end = performance.now() + duration * 1000;
let counter = 0;
const worker = async (w) => {
  while (performance.now() < end) {
    const i = counter++;
    try {
      const r = await complete(i, w % 4 === 3);
      const ref = reference[r.version[0]][i % prompts.length];
      if (!sameArray(r.tokens, ref.tokens) || !sameArray(r.logprobs, ref.logprobs)) {
        mismatches++;
        failures.push(`prompt ${i % prompts.length} at version ${r.version}: tokens differ from the single-request run`);
      }
      versionsSeen.add(r.version);
      latencies.push(r.ms);
      tokensDone += r.tokens.length;
      requestsDone++;
    } catch (e) {
      failures.push(String(e.message ?? e));
    }
  }
};
const refitter = async () => {
  let key = "B";
  while (performance.now() < end - refitEvery * 1000) {
    await new Promise((res) => setTimeout(res, refitEvery * 1000));
    try { refits.push(await refitTo(key)); } catch (e) { failures.push(String(e.message ?? e)); }
    key = key === "A" ? "B" : "A";
  }
};
const t0 = performance.now();
await Promise.all([...Array.from({ length: clients }, (_, w) => worker(w)), refitter()]);
const seconds = (performance.now() - t0) / 1000;

// Phase 2: one request at a time, same requests, no refits.
const seqLatencies = [];
let seqTokens = 0;
const seqEnd = performance.now() + sequentialSeconds * 1000;
const s0 = performance.now();
for (let i = 0; performance.now() < seqEnd; i++) {
  const r = await complete(i, false);
  seqTokens += r.tokens.length;
  seqLatencies.push(r.ms);
}
const seqSeconds = (performance.now() - s0) / 1000;
const metrics = await (await fetch(base + "/metrics")).text();
server.kill("SIGTERM");

const summary = {
  preset, clients, duration_s: Number(seconds.toFixed(1)), max_tokens: maxTokens, env: process.env.REFIT_BATCH_INVARIANT ?? env.REFIT_BATCH_INVARIANT ?? "default",
  requests: requestsDone, failed_or_malformed: failures.length - mismatches, version_mismatches: mismatches,
  tokens_per_s: Number((tokensDone / seconds).toFixed(1)),
  latency_ms: { p50: Math.round(percentile(latencies, 50)), p90: Math.round(percentile(latencies, 90)), p99: Math.round(percentile(latencies, 99)) },
  refits: refits.length, refit_ms: { p50: Math.round(percentile(refits.map((r) => r.ms), 50)), max: Math.round(Math.max(...refits.map((r) => r.ms))) },
  versions_seen: [...versionsSeen].sort(),
  sequential: { requests: seqLatencies.length, tokens_per_s: Number((seqTokens / seqSeconds).toFixed(1)), latency_ms_p50: Math.round(percentile(seqLatencies, 50)) },
  batching_factor: Number(((tokensDone / seconds) / (seqTokens / seqSeconds)).toFixed(2)),
  preemptions: Number(metrics.match(/^refit_preemptions_total (\d+)/m)?.[1] ?? 0),
  first_failures: failures.slice(0, 5),
};
console.log(JSON.stringify(summary, null, 2));
process.exit(failures.length ? 1 : 0);
