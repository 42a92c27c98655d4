// Soak of `refit serve`: many clients for a long, bounded time while a trainer refits the
// weights every few seconds, from disk and from tensors, with bad updates mixed in.
//
//   node bench/soak.mjs REFIT_BINARY [--preset tiny] [--clients 32] [--minutes 30]
//        [--refit-every 3] [--bad-every 3] [--max-tokens 16] [--rss-every 5] [--warmup 120]
//        [--work DIR] [--csv FILE] [--env K=V]
//
// Every response is checked exactly (the engine is batch-invariant): one weight version
// for all its tokens, and the tokens and logprobs of the single-request answer on the
// checkpoint that version label names. Every `bad-every`-th update is a bad one, cycling
// through what a faulty trainer or client sends: a missing path, a truncated checkpoint, a
// checkpoint of another architecture with the same names and shapes, NaN and Inf values (from tensors and from disk), a wrong
// shape, a tensor the model has no parameter for, and a broken JSON body. Each must be
// refused (4xx) with the label served before it unchanged. Resident memory is sampled
// every `rss-every` seconds; after `warmup` seconds it must stay flat (the median of the last
// quarter within 2% or 16 MiB of the first quarter's). Prints a JSON
// summary (and writes the RSS samples to --csv); exits 1 on any failed request, torn
// version, accepted bad update or failed good one.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { complete, option, percentile, post, prompts, rssKib, sameArray, serverEnv, startServer,
         syntheticPair } from "./serve_harness.mjs";

const args = process.argv.slice(2);
const refit = args[0];
const opt = (name, def) => option(args, name, def);
const preset = opt("preset", "tiny");
const clients = Number(opt("clients", 32));
const minutes = Number(opt("minutes", 30));
const refitEvery = Number(opt("refit-every", 3));
const badEvery = Number(opt("bad-every", 3));
const maxTokens = Number(opt("max-tokens", 16));
const rssEvery = Number(opt("rss-every", 5));
const warmup = Number(opt("warmup", 120));
const work = opt("work", fs.mkdtempSync(path.join(os.tmpdir(), "refit-soak-")));
const csv = opt("csv", path.join(work, "rss.csv"));

const models = syntheticPair(refit, preset, work);

// The tensors of an HF folder's safetensors files: [{name, dtype, shape, bytes}].
const safetensorsOf = (folder) => {
  const out = [];
  for (const f of fs.readdirSync(folder).filter((f) => f.endsWith(".safetensors")).sort()) {
    const buf = fs.readFileSync(path.join(folder, f));
    const n = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + n).toString());
    for (const [name, t] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const [s, e] = t.data_offsets;
      out.push({ name, dtype: t.dtype, shape: t.shape, bytes: buf.subarray(8 + n + s, 8 + n + e) });
    }
  }
  return out;
};
const carrierDtype = { F32: "float32", BF16: "bfloat16", F16: "float16" };
const tensorEntry = (tensors) => tensors.map((t) => ({ name: t.name, dtype: carrierDtype[t.dtype], shape: t.shape,
                                                       data: Buffer.from(t.bytes).toString("base64") }));
const tensorsOf = { A: safetensorsOf(models.A), B: safetensorsOf(models.B) };

// A copy of checkpoint B whose first tensor holds one NaN-free Inf, or whose files are cut short.
const variantOf = (name, edit) => {
  const dir = path.join(work, `${preset}-${name}`);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.cpSync(models.B, dir, { recursive: true });
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith(".safetensors"))) edit(path.join(dir, f));
  return dir;
};
const truncated = variantOf("truncated", (f) => fs.truncateSync(f, Math.floor(fs.statSync(f).size / 2)));
const withInf = variantOf("inf", (f) => {
  const buf = fs.readFileSync(f);
  const n = Number(buf.readBigUInt64LE(0));
  const [first] = Object.entries(JSON.parse(buf.subarray(8, 8 + n).toString())).filter(([k]) => k !== "__metadata__");
  const at = 8 + n + first[1].data_offsets[0];
  if (first[1].dtype === "F32") buf.writeFloatLE(Infinity, at); else buf.writeUInt16LE(first[1].dtype === "BF16" ? 0x7f80 : 0x7c00, at);
  fs.writeFileSync(f, buf);
});
// Another architecture of the same dimensions: every name and shape of the Llama model matches.
const otherModel = path.join(work, `${preset}-qwen3`);
if (!fs.existsSync(path.join(otherModel, "config.json")))
  execFileSync(refit, ["synth", "--arch", "qwen3", "--preset", preset, "--format", "hf", "--seed", "2", "-q", "-o", otherModel]);

// One tensor of A with its first value replaced.
const poisoned = (value) => {
  const t = tensorsOf.A.find((t) => t.dtype === "F32" || t.dtype === "BF16" || t.dtype === "F16");
  const bytes = Buffer.from(t.bytes);
  if (t.dtype === "F32") bytes.writeFloatLE(value, 0);
  else bytes.writeUInt16LE(t.dtype === "BF16" ? 0x7fc0 : 0x7e00, 0);  // NaN in 16 bits
  return [{ ...t, bytes }];
};
const wrongShape = () => {
  const t = tensorsOf.A[0];
  return [{ ...t, shape: [...t.shape.slice(0, -1), t.shape.at(-1) + 1], bytes: Buffer.concat([t.bytes, t.bytes.subarray(0, t.bytes.length / t.shape.at(-1))]) }];
};
const unknownTensor = () => [{ ...tensorsOf.A[0], name: "model.layers.9999.mlp.not_a_parameter.weight" }];
const badUpdates = [
  ["missing path", () => ["/update_weights_from_disk", { model_path: path.join(work, "no-such-checkpoint") }]],
  ["truncated checkpoint", () => ["/update_weights_from_disk", { model_path: truncated }]],
  ["another architecture", () => ["/update_weights_from_disk", { model_path: otherModel }]],
  ["Inf on disk", () => ["/update_weights_from_disk", { model_path: withInf }]],
  ["NaN tensor", () => ["/update_weights_from_tensor", { serialized_named_tensors: [tensorEntry(poisoned(NaN))] }]],
  ["wrong shape", () => ["/update_weights_from_tensor", { serialized_named_tensors: [tensorEntry(wrongShape())] }]],
  ["unknown tensor", () => ["/update_weights_from_tensor", { serialized_named_tensors: [tensorEntry(unknownTensor())] }]],
  ["broken JSON", () => ["/update_weights_from_disk", null, `{"model_path": "${models.B}", "weight_version": `]],
];

const { server, base, pid } = await startServer(refit, models.A, serverEnv(args));
const exited = new Promise((res) => server.on("exit", (code, signal) => res({ code, signal })));
const versionNow = async () => JSON.parse(await (await fetch(base + "/get_weight_version")).text()).weight_version;

// Good refits alternate the checkpoint and the route: disk, then the same weights as tensors.
let refitCount = 0, lastLabel = null;
const refitTo = async (key, route) => {
  const label = `${key}-${refitCount++}`;
  const body = route === "disk" ? { model_path: models[key], weight_version: label }
                                : { serialized_named_tensors: [tensorEntry(tensorsOf[key])], weight_version: label };
  const t0 = performance.now();
  const r = await post(base, route === "disk" ? "/update_weights_from_disk" : "/update_weights_from_tensor", body);
  const j = JSON.parse(r.text);
  if (r.status !== 200 || !j.success) throw new Error(`refit to ${key} from ${route} failed: ${r.status} ${j.message}`);
  lastLabel = label;
  return performance.now() - t0;
};

const reference = { A: [], B: [] };
for (const key of ["A", "B"]) {
  await refitTo(key, "disk");
  for (let i = 0; i < prompts.length; i++) reference[key].push(await complete(base, i, false, maxTokens));
}
await refitTo("A", "disk");

const failures = [], latencies = [], refitMs = { disk: [], tensor: [] }, rss = [];
const bad = { sent: 0, refused: 0, accepted: 0, label_changed: 0, kinds: {} };
let requests = 0, torn = 0, failed = 0, tokens = 0;
const t0 = performance.now();
const end = t0 + minutes * 60 * 1000;
const note = (list, msg) => { if (list.length < 20) list.push(msg); };
// Math.max(...xs) overflows the stack for the tens of thousands of latencies of a long run.
const maxOf = (xs) => xs.reduce((m, x) => (x > m ? x : m), -Infinity);

const worker = async (w) => {
  for (let i = w; performance.now() < end; i += clients) {
    try {
      const r = await complete(base, i, w % 4 === 3, maxTokens);
      const ref = reference[r.version[0]]?.[i % prompts.length];
      if (!ref || !sameArray(r.tokens, ref.tokens) || !sameArray(r.logprobs, ref.logprobs)) {
        torn++;
        note(failures, `prompt ${i % prompts.length} at version ${r.version}: not the answer of that checkpoint`);
      }
      latencies.push(r.ms);
      tokens += r.tokens.length;
      requests++;
    } catch (e) {
      failed++;
      note(failures, String(e.message ?? e));
    }
  }
};
const trainer = async () => {
  let key = "B";
  for (let n = 1; performance.now() < end - refitEvery * 1000; n++) {
    await new Promise((res) => setTimeout(res, refitEvery * 1000));
    try {
      if (n % badEvery === 0) {
        const [kind, make] = badUpdates[(n / badEvery - 1) % badUpdates.length];
        const before = await versionNow();
        const [route, body, raw] = make();
        const r = await post(base, route, body, raw);
        bad.sent++;
        bad.kinds[kind] = (bad.kinds[kind] ?? 0) + 1;
        if (r.status >= 400 && r.status < 500) bad.refused++;
        else { bad.accepted++; note(failures, `bad update "${kind}" answered ${r.status}: ${r.text.slice(0, 200)}`); }
        if ((await versionNow()) !== before) { bad.label_changed++; note(failures, `bad update "${kind}" changed the label`); }
        continue;
      }
      const route = n % 2 ? "disk" : "tensor";
      refitMs[route].push(await refitTo(key, route));
      key = key === "A" ? "B" : "A";
    } catch (e) {
      failed++;
      note(failures, String(e.message ?? e));
    }
  }
};
const sampler = async () => {
  while (performance.now() < end) {
    rss.push([Math.round((performance.now() - t0) / 1000), rssKib(pid)]);
    if (rss.length % Math.max(1, Math.round(60 / rssEvery)) === 0)  // a line a minute, to stderr
      console.error(`soak: ${rss.at(-1)[0]} s, ${requests} requests, ${failed} failed, ${torn} torn, ` +
                    `${refitMs.disk.length + refitMs.tensor.length} refits, ${bad.refused}/${bad.sent} bad refused, ` +
                    `RSS ${(rss.at(-1)[1] / 1024).toFixed(0)} MiB`);
    await new Promise((res) => setTimeout(res, rssEvery * 1000));
  }
};
await Promise.all([...Array.from({ length: clients }, (_, w) => worker(w)), trainer(), sampler()]);
const seconds = (performance.now() - t0) / 1000;
server.kill("SIGTERM");
const exit = await exited;

fs.writeFileSync(csv, "seconds,rss_kib\n" + rss.map((r) => r.join(",")).join("\n") + "\n");
// Flat: the typical RSS (the median: updates add short peaks while a body is parsed) of the
// last quarter after warm-up against that of the first quarter, and the peaks beside it.
const after = rss.filter(([s]) => s >= warmup).map((r) => r[1]);
const mib = (k) => Number((k / 1024).toFixed(1));
const quarter = Math.max(1, Math.floor(after.length / 4));
const first = after.slice(0, quarter), last = after.slice(-quarter);
const growth = after.length >= 2 ? percentile(last, 50) - percentile(first, 50) : 0;
const flat = after.length >= 2 && growth <= Math.max(16 * 1024, 0.02 * percentile(first, 50));
if (!flat) note(failures, `RSS grew by ${mib(growth)} MiB after warm-up`);
const commits = refitMs.disk.length + refitMs.tensor.length;
const ms = (xs) => ({ p50: Math.round(percentile(xs, 50)), max: Math.round(maxOf(xs)) });

const summary = {
  preset, clients, minutes, seconds: Math.round(seconds), max_tokens: maxTokens,
  requests, failed_requests: failed, torn_versions: torn, tokens_per_s: Number((tokens / seconds).toFixed(1)),
  latency_ms: { p50: Math.round(percentile(latencies, 50)), p99: Math.round(percentile(latencies, 99)), max: Math.round(maxOf(latencies)) },
  good_refits: commits, refit_ms: { disk: ms(refitMs.disk), tensor: ms(refitMs.tensor) }, last_label: lastLabel,
  bad_updates: bad,
  rss_mib: { first_quarter_median: mib(percentile(first, 50) ?? 0), last_quarter_median: mib(percentile(last, 50) ?? 0),
             first_quarter_max: mib(maxOf([0, ...first])), last_quarter_max: mib(maxOf([0, ...last])), growth: mib(growth), flat },
  rss_csv: csv, server_exit: exit, first_failures: failures.slice(0, 10),
};
console.log(JSON.stringify(summary, null, 2));
process.exit(failed || torn || bad.accepted || bad.label_changed || !flat || !commits ? 1 : 0);
