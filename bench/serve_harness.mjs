// What the serving benchmarks share: the two synthetic checkpoints they refit between, a
// `refit serve` process on a free port, one checked completion, and small statistics.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

// `--name value` from argv, or `def`.
export const option = (args, name, def) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : def;
};

// The server's environment: this process's plus every `--env K=V`.
export const serverEnv = (args) => {
  const env = { ...process.env };
  for (let i = 0; i < args.length; i++)
    if (args[i] === "--env") {
      const [k, v] = args[i + 1].split("=");
      env[k] = v;
    }
  return env;
};

// Two synthetic HF checkpoints of one preset (seeds 0 and 1) in `work`, written once.
export const syntheticPair = (refit, preset, work) => {
  const models = { A: path.join(work, `${preset}-a`), B: path.join(work, `${preset}-b`) };
  for (const [key, seed] of [["A", 0], ["B", 1]])
    if (!fs.existsSync(path.join(models[key], "config.json")))
      execFileSync(refit, ["synth", "--preset", preset, "--format", "hf", "--seed", String(seed), "-q", "-o", models[key]]);
  return models;
};

// Starts `refit serve -m model` on a free port; resolves to {server, base, pid} once it listens.
export const startServer = async (refit, model, env, extra = []) => {
  const server = spawn(refit, ["serve", "-m", model, "--port", "0", "--served-model-name", "m", ...extra], {
    stdio: ["ignore", "pipe", "inherit"], env });
  const { port, pid } = await new Promise((resolve, reject) => {
    let out = "";
    server.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/:(\d+) \(.*pid (\d+)\)/);
      if (m) resolve({ port: Number(m[1]), pid: Number(m[2]) });
    });
    server.on("exit", (c) => reject(new Error(`server exited ${c}`)));
  });
  return { server, base: `http://127.0.0.1:${port}`, pid };
};

// POST a JSON value (or a raw string body); {status, text}.
export const post = async (base, route, body, raw) => {
  const r = await fetch(base + route, { method: "POST", body: raw ?? JSON.stringify(body),
                                         headers: { "content-type": "application/json" } });
  return { status: r.status, text: await r.text() };
};

export const prompts = ["Once upon a time", "The little robot", "In a faraway land there lived", "She opened the door and",
                        "Tom and his dog", "It was a rainy day", "The moon was bright", "A small bird sang"];

// One greedy completion of prompt i with `maxTokens` tokens, streamed or not; returns
// {tokens, logprobs, version, ms} or throws describing what was malformed: a status other
// than 200, a stream without [DONE], the wrong token count, or several weight versions.
export async function complete(base, i, stream, maxTokens) {
  const body = { model: "m", prompt: prompts[i % prompts.length], max_tokens: maxTokens, temperature: 0,
                 ignore_eos: true, logprobs: 0, stream };
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

export const percentile = (xs, p) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
// The middle value, or the mean of the two middle ones (percentile(xs, 50) takes the upper).
export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
export const sameArray = (a, b) => a.length === b.length && a.every((x, k) => x === b[k]);

// Resident memory of a process, KiB (0 once it is gone).
export const rssKib = (pid) => {
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, "utf8").match(/^VmRSS:\s+(\d+)/m);
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
};
