// `refit serve` beside llama.cpp's llama-server on the same GGUF, in one run: for each client
// count, refit, then llama-server, then refit again (the second refit run shows how much the
// machine drifted during the pair). Clients loop greedy /v1/completions of max_tokens tokens
// (ignore_eos, so every request generates all of them) for `duration` seconds; the figure is
// aggregate generated tokens per second over the window. --temperature T samples instead, at
// temperature T alone (top_k 0, top_p 1, min_p 0 sent to both, as an RL rollout asks: without
// them llama-server would apply its default top-k/top-p/min-p chain).
//
//   node bench/serve_side_by_side.mjs REFIT LLAMA_SERVER MODEL.gguf [--clients 1,8,32]
//        [--max-tokens 64] [--duration 20] [--threads 2] [--refit-args "..."] [--temperature T]
//        [--rounds R]
//
// --rounds R repeats each count's triple R times (on a VM whose speed drifts by tens of
// percent within minutes, one triple can land in a fast or a slow spell); the table then
// gives every run and the median of the per-round ratios.
//
// LLAMA_SERVER is a llama-server binary you built yourself (refit neither ships nor builds
// llama.cpp), or `-` for refit alone (two refit runs per count, e.g. to compare builds; the
// llama-server built here answers some sampled outputs of a synthetic model with HTTP 500,
// "does not match the expected Content-only format"). llama-server gets `-np N` (N = the client count) and N x 512 tokens of
// context, so each client has a slot; refit serves every count from one process with its
// defaults (batch-invariant kernels, prefix cache on). Every response must carry exactly
// max_tokens tokens. Prints one table per engine and the ratios.
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import { median, option, percentile, prompts } from "./serve_harness.mjs";

const args = process.argv.slice(2);
if (args.length < 3 || args[0].startsWith("--")) {
  console.error("usage: node bench/serve_side_by_side.mjs REFIT LLAMA_SERVER MODEL.gguf [--clients 1,8,32] " +
                "[--max-tokens 64] [--duration 20] [--threads 2] [--refit-args \"...\"] [--temperature T] " +
                "[--rounds R]");
  process.exit(2);
}
const [refit, llamaServer, model] = args;
const opt = (name, def) => option(args, name, def);
const counts = opt("clients", "1,8,32").split(",").map(Number);
const maxTokens = Number(opt("max-tokens", 64));
const duration = Number(opt("duration", 20));
const threads = String(opt("threads", 2));
const refitArgs = opt("refit-args", "").split(" ").filter((s) => s.length);
const temperature = Number(opt("temperature", 0));
const rounds = Number(opt("rounds", 1));
if (!(Number.isInteger(rounds) && rounds >= 1)) {
  console.error(`--rounds must be an integer >= 1, got ${opt("rounds", 1)}`);
  process.exit(2);
}
if (!(temperature >= 0 && Number.isFinite(temperature))) {
  console.error(`--temperature must be a number >= 0, got ${opt("temperature", 0)}`);
  process.exit(2);
}
const sampling = temperature > 0 ? { temperature, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 1 }
                                 : { temperature: 0 };

const freePort = () => new Promise((resolve) => {
  const s = net.createServer();
  s.listen(0, "127.0.0.1", () => {
    const { port } = s.address();
    s.close(() => resolve(port));
  });
});

// Starts a server and resolves once GET /health answers 200 (both engines have the route).
async function start(cmd, argv) {
  const child = spawn(cmd, argv, { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  child.stderr.on("data", (d) => { err = (err + d).slice(-4000); });
  const exited = new Promise((_, reject) => child.on("exit", (c) => reject(new Error(`${cmd} exited ${c}: ${err}`))));
  const port = Number(argv[argv.indexOf("--port") + 1]);
  const base = `http://127.0.0.1:${port}`;
  const ready = (async () => {
    for (;;) {
      try {
        if ((await fetch(base + "/health")).status === 200) return;
      } catch {}
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  await Promise.race([ready, exited]);
  return { child, base, stop: () => new Promise((r) => { child.removeAllListeners("exit"); child.on("exit", r); child.kill("SIGTERM"); }) };
}

async function completion(base, i) {
  const body = { model: "m", prompt: prompts[i % prompts.length], max_tokens: maxTokens, ...sampling,
                 ignore_eos: true, stream: false };
  const t0 = performance.now();
  const r = await fetch(base + "/v1/completions", { method: "POST", body: JSON.stringify(body),
                                                     headers: { "content-type": "application/json" } });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${text.slice(0, 300)}`);
  const n = JSON.parse(text).usage?.completion_tokens;
  if (n !== maxTokens) throw new Error(`expected ${maxTokens} completion tokens, got ${n}: ${text.slice(0, 300)}`);
  return performance.now() - t0;
}

// `clients` closed-loop clients for `duration` seconds; requests started before the deadline
// all finish and count, and the window runs until the last one does.
async function load(base, clients) {
  for (let i = 0; i < clients; i++) await completion(base, i);  // warm: every prompt once
  const t0 = performance.now(), deadline = t0 + duration * 1000, ms = [];
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let i = c; performance.now() < deadline; i += clients) ms.push(await completion(base, i));
  }));
  const seconds = (performance.now() - t0) / 1000;
  return { clients, requests: ms.length, tok_s: (ms.length * maxTokens) / seconds,
           p50_ms: percentile(ms, 50), p90_ms: percentile(ms, 90) };
}

// The load average, to show whether something else ran during a run.
const loadavg = () => fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

async function runRefit(clients) {
  const port = await freePort();
  const s = await start(refit, ["serve", "-m", model, "--port", String(port), "-t", threads,
                                "--served-model-name", "m", ...refitArgs]);
  try {
    return await load(s.base, clients);
  } finally {
    await s.stop();
  }
}

async function runLlama(clients) {
  const port = await freePort();
  const s = await start(llamaServer, ["-m", model, "--port", String(port), "-t", threads, "-tb", threads,
                                      "-np", String(clients), "-c", String(512 * clients), "--no-webui"]);
  try {
    return await load(s.base, clients);
  } finally {
    await s.stop();
  }
}

console.log(`model ${model}; ${maxTokens} tokens per request, ` +
            `${temperature > 0 ? `temperature ${temperature}` : "greedy"}, ${duration} s per run, ${threads} threads; ` +
            `${new Date().toISOString()}`);
const report = (label, n, r) =>
  console.log(`${label.padEnd(12)} clients ${n}: ${r.tok_s.toFixed(1)} tok/s (${r.requests} requests, ` +
              `p50 ${r.p50_ms.toFixed(0)} ms; load ${loadavg()})`);
const rows = [];
for (const n of counts) {
  const row = { n, refit: [], llama: [], ratios: [] };
  for (let round = 0; round < rounds; round++) {
    const a = await runRefit(n);
    report("refit", n, a);
    const b = llamaServer === "-" ? null : await runLlama(n);
    if (b) report("llama-server", n, b);
    const c = await runRefit(n);
    report("refit again", n, c);
    if (!b) continue;
    row.refit.push(a.tok_s, c.tok_s);
    row.llama.push(b.tok_s);
    row.ratios.push(a.tok_s / b.tok_s, c.tok_s / b.tok_s);
  }
  if (row.llama.length) rows.push(row);
}
if (!rows.length) process.exit(0);
console.log("\n| clients | refit tok/s (runs) | llama-server tok/s (runs) | refit / llama-server, each round | median |");
console.log("|---:|---:|---:|---:|---:|");
for (const r of rows) {
  const fmt = (xs) => xs.map((x) => x.toFixed(1)).join(" / ");
  console.log(`| ${r.n} | ${fmt(r.refit)} | ${fmt(r.llama)} | ` +
              `${Math.min(...r.ratios).toFixed(2)}-${Math.max(...r.ratios).toFixed(2)}x | ` +
              `${median(r.ratios).toFixed(2)}x |`);
}
