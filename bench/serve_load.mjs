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
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const args = process.argv.slice(2);
const refit = args[0];
const opt = (name, def) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : def;
};
const preset = opt("preset", "small");
const clients = Number(opt("clients", 32));
const duration = Number(opt("duration", 60));
const refitEvery = Number(opt("refit-every", 5));
const maxTokens = Number(opt("max-tokens", 32));
const sequentialSeconds = Number(opt("sequential", 30));
const work = opt("work", fs.mkdtempSync(path.join(os.tmpdir(), "refit-load-")));
const env = { ...process.env };
for (let i = 0; i < args.length; i++) if (args[i] === "--env") { const [k, v] = args[i + 1].split("="); env[k] = v; }

const models = { A: path.join(work, `${preset}-a`), B: path.join(work, `${preset}-b`) };
for (const [key, seed] of [["A", 0], ["B", 1]])
  if (!fs.existsSync(path.join(models[key], "config.json")))
    execFileSync(refit, ["synth", "--preset", preset, "--format", "hf", "--seed", String(seed), "-q", "-o", models[key]]);

const server = spawn(refit, ["serve", "-m", models.A, "--port", "0", "--served-model-name", "m"], {
  stdio: ["ignore", "pipe", "inherit"], env });
const port = await new Promise((resolve, reject) => {
  let out = "";
  server.stdout.on("data", (d) => { out += d; const m = out.match(/:(\d+) \(/); if (m) resolve(Number(m[1])); });
  server.on("exit", (c) => reject(new Error(`server exited ${c}`)));
});
const base = `http://127.0.0.1:${port}`;
const post = async (route, body) => {
  const r = await fetch(base + route, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } });
  const text = await r.text();
  return { status: r.status, text };
};

const prompts = ["Once upon a time", "The little robot", "In a faraway land there lived", "She opened the door and",
                 "Tom and his dog", "It was a rainy day", "The moon was bright", "A small bird sang"];
const request = (i) => ({ model: "m", prompt: prompts[i % prompts.length], max_tokens: maxTokens, temperature: 0,
                          ignore_eos: true, logprobs: 0 });

// One completion; returns {tokens, versions, version, logprobs} or throws describing what was malformed.
async function complete(i, stream) {
  const body = { ...request(i), stream };
  const t0 = performance.now();
  const r = await fetch(base + "/v1/completions", { method: "POST", body: JSON.stringify(body),
                                                     headers: { "content-type": "application/json" } });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${text.slice(0, 300)}`);
  let tokens = [], versions = [], logprobs = [], finish = null;
  if (!stream) {
    const j = JSON.parse(text);
    const c = j.choices[0];
    tokens = c.token_ids; versions = c.weight_versions; logprobs = c.logprobs.token_logprobs; finish = c.finish_reason;
    if (versions.some((v) => v !== j.weight_version)) throw new Error(`mixed versions ${versions} vs ${j.weight_version}`);
  } else {
    const events = text.split("\n\n").filter((e) => e.length);
    if (events.at(-1) !== "data: [DONE]") throw new Error(`stream does not end with [DONE]: ${events.at(-1)}`);
    for (const e of events.slice(0, -1)) {
      if (!e.startsWith("data: ")) throw new Error(`malformed SSE event: ${e.slice(0, 100)}`);
      const c = JSON.parse(e.slice(6)).choices[0];
      tokens.push(...c.token_ids); versions.push(...c.weight_versions);
      logprobs.push(...c.logprobs.token_logprobs);
      finish = c.finish_reason ?? finish;
    }
  }
  if (tokens.length !== maxTokens || versions.length !== maxTokens || finish !== "length")
    throw new Error(`expected ${maxTokens} tokens with finish length, got ${tokens.length} (${finish})`);
  if (versions.some((v) => v !== versions[0])) throw new Error(`a request saw several weight versions: ${[...new Set(versions)]}`);
  return { tokens, logprobs, version: versions[0], ms: performance.now() - t0 };
}

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

const percentile = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))]; };
const sameArray = (a, b) => a.length === b.length && a.every((x, k) => x === b[k]);

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
