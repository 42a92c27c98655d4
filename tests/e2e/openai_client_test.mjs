// End-to-end test of `refit serve` with the official OpenAI Node client.
//
//   node openai_client_test.mjs /path/to/refit
//
// Writes two `tiny` synthetic checkpoints (seeds 0 and 1) and a wrong-shaped copy into a
// temporary folder, starts the server on a free port, and checks completions, chat,
// streaming, n/seed/stop/logprobs, OpenAI-style errors, and the RL endpoints (refit to
// new weights, refused refits leave the server serving the old ones). Exits non-zero on
// the first failure.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import assert from "node:assert/strict";
import OpenAI from "openai";

const refit = process.argv[2] ?? path.resolve("build/refit");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "refit-e2e-"));
const modelA = path.join(work, "tiny-a");
const modelB = path.join(work, "tiny-b");
const wrong = path.join(work, "tiny-wrong");
for (const [dir, seed] of [[modelA, 0], [modelB, 1]])
  execFileSync(refit, ["synth", "--preset", "tiny", "--format", "hf", "--seed", String(seed), "-q", "-o", dir]);
// Wrong shape: the same tensors under a config.json that claims another ffn size.
fs.mkdirSync(wrong);
for (const f of fs.readdirSync(modelB)) {
  if (f === "config.json") {
    const c = JSON.parse(fs.readFileSync(path.join(modelB, f), "utf8"));
    c.intermediate_size += 32;
    fs.writeFileSync(path.join(wrong, f), JSON.stringify(c));
  } else fs.symlinkSync(path.join(modelB, f), path.join(wrong, f));
}

const server = spawn(refit, ["serve", "-m", modelA, "--port", "0", "--served-model-name", "tiny"], {
  stdio: ["ignore", "pipe", "inherit"],
});
const port = await new Promise((resolve, reject) => {
  let out = "";
  server.stdout.on("data", (d) => {
    out += d;
    const m = out.match(/listening on http:\/\/[^:]+:(\d+)/);
    if (m) resolve(Number(m[1]));
  });
  server.on("exit", (code) => reject(new Error(`refit serve exited with ${code}: ${out}`)));
  setTimeout(() => reject(new Error("refit serve did not start in 120 s")), 120000);
});
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });

async function post(route, body, raw = false) {
  const r = await fetch(base + route, { method: "POST", body: raw ? body : JSON.stringify(body),
                                        headers: { "content-type": "application/json" } });
  return { status: r.status, json: await r.json() };
}
async function expectApiError(promise, status, fragment) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
    assert.equal(e.status, status, e.message);
    if (fragment) assert.match(e.message, fragment);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

let failures = 0;
async function test(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}\n     ${e.stack ?? e}`);
  }
}

const prompt = "Once upon a time";
let greedy;

await test("models.list names the served model", async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, "tiny");
});

await test("completion: greedy, logprobs, token ids, weight versions", async () => {
  greedy = await client.completions.create({ model: "tiny", prompt, max_tokens: 12, temperature: 0, logprobs: 3 });
  const c = greedy.choices[0];
  assert.equal(c.finish_reason, "length");
  assert.equal(c.token_ids.length, 12);
  assert.equal(c.logprobs.token_logprobs.length, 12);
  for (const lp of c.logprobs.token_logprobs) assert.ok(lp <= 0);
  for (const top of c.logprobs.top_logprobs) assert.equal(Object.keys(top).length, 3);
  assert.deepEqual(c.weight_versions, Array(12).fill("1"));
  assert.equal(greedy.weight_version, "1");
  assert.equal(greedy.usage.completion_tokens, 12);
  // Greedy is deterministic, logprobs bit for bit.
  const again = await client.completions.create({ model: "tiny", prompt, max_tokens: 12, temperature: 0, logprobs: 3 });
  assert.deepEqual(again.choices[0].token_ids, c.token_ids);
  assert.deepEqual(again.choices[0].logprobs.token_logprobs, c.logprobs.token_logprobs);
});

await test("completion: stream equals the non-streamed text", async () => {
  const stream = await client.completions.create({ model: "tiny", prompt, max_tokens: 12, temperature: 0, stream: true });
  let text = "", ids = [], finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    ids.push(...chunk.choices[0].token_ids);
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(text, greedy.choices[0].text);
  assert.deepEqual(ids, greedy.choices[0].token_ids);
  assert.equal(finish, "length");
});

await test("completion: n with seed, and stop strings", async () => {
  const r = await client.completions.create({ model: "tiny", prompt, max_tokens: 8, temperature: 1.0, n: 3, seed: 7 });
  assert.equal(r.choices.length, 3);
  const r2 = await client.completions.create({ model: "tiny", prompt, max_tokens: 8, temperature: 1.0, n: 3, seed: 7 });
  assert.deepEqual(r2.choices.map((c) => c.text), r.choices.map((c) => c.text));
  const full = greedy.choices[0].text;
  const stop = full.slice(Math.floor(full.length / 2), Math.floor(full.length / 2) + 2);
  const cut = await client.completions.create({ model: "tiny", prompt, max_tokens: 12, temperature: 0, stop: [stop] });
  assert.equal(cut.choices[0].finish_reason, "stop");
  assert.equal(cut.choices[0].text, full.slice(0, full.indexOf(stop)));
});

await test("chat: completion and stream agree", async () => {
  const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Tell me a story." }];
  const r = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2 });
  const m = r.choices[0].message;
  assert.equal(m.role, "assistant");
  assert.equal(typeof m.content, "string");
  assert.equal(r.choices[0].logprobs.content.length, r.choices[0].token_ids.length);
  const stream = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 10, temperature: 0, stream: true,
                                                        stream_options: { include_usage: true } });
  let text = "", role = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    role = chunk.choices[0].delta.role ?? role;
    text += chunk.choices[0].delta.content ?? "";
  }
  assert.equal(role, "assistant");
  assert.equal(text, m.content);
  assert.equal(usage.completion_tokens, r.usage.completion_tokens);
});

await test("errors: negative max_tokens, long prompt, wrong model, malformed JSON; unknown fields ignored", async () => {
  const ignored = await client.completions.create({ model: "tiny", prompt, max_tokens: 4, temperature: 0, bogus_field: 1 });
  assert.equal(ignored.choices[0].token_ids.length, 4);
  await expectApiError(client.completions.create({ model: "tiny", prompt, max_tokens: -1 }), 400, /max_tokens/);
  const e = await expectApiError(client.completions.create({ model: "tiny", prompt: "word ".repeat(3000), max_tokens: 4 }), 400,
                                 /maximum context length/);
  assert.equal(e.code, "context_length_exceeded");
  await expectApiError(client.completions.create({ model: "nope", prompt, max_tokens: 4 }), 404, /does not exist/);
  await expectApiError(client.chat.completions.create({ model: "tiny", messages: [], max_tokens: 4 }), 400, /messages/);
  const bad = await post("/v1/completions", '{"prompt": "x", ', true);
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /not valid JSON/);
  // Still serving.
  const ok = await client.completions.create({ model: "tiny", prompt, max_tokens: 2, temperature: 0 });
  assert.equal(ok.choices[0].token_ids.length, 2);
});

await test("refit: update from disk, versions, refused updates change nothing", async () => {
  let v = await (await fetch(base + "/get_weight_version")).json();
  assert.equal(v.weight_version, "1");
  // Refused: missing file, wrong shape, bad tensor. The server keeps its weights.
  let r = await post("/update_weights_from_disk", { model_path: path.join(work, "missing") });
  assert.equal(r.json.success, false);
  r = await post("/update_weights_from_disk", { model_path: wrong });
  assert.equal(r.json.success, false);
  assert.match(r.json.message, /does not match/);
  r = await post("/update_weights_from_tensor", { named_tensors: [{ name: "model.norm.weight", dtype: "f32", shape: [3], data: "AAAAAAAAAAAAAAAA" }] });
  assert.equal(r.json.success, false);
  // An unknown field is ignored, as SGLang ignores it: this reloads A (a no-op on the values).
  r = await post("/update_weights_from_disk", { model_path: modelA, bogus: true });
  assert.equal(r.status, 200, r.json.message);
  const same = await client.completions.create({ model: "tiny", prompt, max_tokens: 12, temperature: 0 });
  assert.deepEqual(same.choices[0].token_ids, greedy.choices[0].token_ids);
  // Accepted: new weights, labelled.
  r = await post("/update_weights_from_disk", { model_path: modelB, weight_version: "step-1" });
  assert.equal(r.json.success, true, r.json.message);
  assert.equal(r.json.weight_version, "step-1");
  const after = await client.completions.create({ model: "tiny", prompt, max_tokens: 12, temperature: 0 });
  assert.equal(after.weight_version, "step-1");
  assert.notDeepEqual(after.choices[0].token_ids, greedy.choices[0].token_ids);
  // Back to A: exactly the first answer again.
  r = await post("/update_weights_from_disk", { model_path: modelA, abort_all_requests: true });
  assert.equal(r.json.success, true, r.json.message);
  const back = await client.completions.create({ model: "tiny", prompt, max_tokens: 12, temperature: 0, logprobs: 0 });
  assert.deepEqual(back.choices[0].token_ids, greedy.choices[0].token_ids);
  assert.deepEqual(back.choices[0].logprobs.token_logprobs, greedy.choices[0].logprobs.token_logprobs);
  const w = await post("/get_weights_by_name", { name: "model.layers.0.self_attn.k_proj.weight", truncate_size: 5 });
  assert.equal(w.json.success, true, w.json.message);
  assert.equal(w.json.values.length, 5);
});

await test("pause / continue, flush_cache, health, metrics", async () => {
  let r = await post("/pause_generation", { mode: "in_place" });
  assert.equal(r.json.success, true);
  const pending = client.completions.create({ model: "tiny", prompt, max_tokens: 3, temperature: 0 });
  await new Promise((res) => setTimeout(res, 200));
  r = await post("/pause_generation", { mode: "sideways" });
  assert.equal(r.status, 400);
  r = await post("/continue_generation", {});
  assert.equal(r.json.success, true);
  assert.equal((await pending).choices[0].token_ids.length, 3);
  r = await post("/flush_cache", {});
  assert.equal(r.json.success, true);
  assert.equal((await fetch(base + "/health")).status, 200);
  const metrics = await (await fetch(base + "/metrics")).text();
  for (const name of ["refit_requests_total", "refit_generation_tokens_total", "refit_queue_depth", "refit_kv_cache_usage_ratio",
                      "refit_refits_total", "refit_refit_duration_seconds_total"])
    assert.match(metrics, new RegExp(`^${name}`, "m"));
  assert.match(metrics, /^refit_refits_total 3$/m);
  assert.match(metrics, /^refit_refit_failures_total [1-9]/m);
});

await test("prefix cache: a repeated prompt hits, a refit drops the cached blocks, answers stay exact", async () => {
  const metric = async (name) =>
    Number((await (await fetch(base + "/metrics")).text()).match(new RegExp(`^${name} (\\S+)`, "m"))[1]);
  const long = "once upon a time there was a little robot who liked to count the stars at night ".repeat(4);
  const ask = () => client.completions.create({ model: "tiny", prompt: long, max_tokens: 8, temperature: 0, logprobs: 0 });
  const first = await ask();
  const hits = await metric("refit_prefix_cache_hits_total");
  assert.ok((await metric("refit_prefix_cache_blocks")) > 0);
  const again = await ask();
  assert.ok((await metric("refit_prefix_cache_hits_total")) > hits, "the repeated prompt did not hit the cache");
  assert.deepEqual(again.choices[0].token_ids, first.choices[0].token_ids);
  assert.deepEqual(again.choices[0].logprobs.token_logprobs, first.choices[0].logprobs.token_logprobs);
  // A refit drops every block computed with the old weights (even with flush_cache false).
  let r = await post("/update_weights_from_disk", { model_path: modelB, flush_cache: false });
  assert.equal(r.json.success, true, r.json.message);
  assert.ok(r.json.flushed_cache_blocks > 0);
  assert.equal(await metric("refit_prefix_cache_blocks"), 0);
  const onB = await ask();
  assert.notDeepEqual(onB.choices[0].token_ids, first.choices[0].token_ids);
  r = await post("/update_weights_from_disk", { model_path: modelA });
  assert.equal(r.json.success, true, r.json.message);
  const back = await ask();
  assert.deepEqual(back.choices[0].token_ids, first.choices[0].token_ids);
  assert.deepEqual(back.choices[0].logprobs.token_logprobs, first.choices[0].logprobs.token_logprobs);
  r = await post("/flush_cache", {});
  assert.ok(r.json.flushed_cache_blocks > 0);
  assert.equal(await metric("refit_prefix_cache_blocks"), 0);
});

await test("a client that disconnects mid-stream frees its KV blocks", async () => {
  const controller = new AbortController();
  const stream = await client.completions.create({ model: "tiny", prompt, max_tokens: 1500, temperature: 0, stream: true },
                                                  { signal: controller.signal });
  let n = 0;
  try {
    for await (const chunk of stream) if (++n === 3) controller.abort();
  } catch (e) { /* aborted */ }
  let used = -1;
  for (let i = 0; i < 100 && used !== 0; i++) {
    await new Promise((res) => setTimeout(res, 50));
    const m = await (await fetch(base + "/metrics")).text();
    used = Number(m.match(/^refit_kv_cache_blocks_used (\d+)/m)[1]);
  }
  assert.equal(used, 0);
});

await test("a client that hangs up before a non-streaming answer stops its generation", async () => {
  const metric = async (name) =>
    Number((await (await fetch(base + "/metrics")).text()).match(new RegExp(`^${name} (\\S+)`, "m"))[1]);
  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
  const before = await metric("refit_generation_tokens_total");
  const controller = new AbortController();
  const pending = client.completions
    .create({ model: "tiny", prompt, max_tokens: 1500, temperature: 0, ignore_eos: true },
            { signal: controller.signal, maxRetries: 0 })
    .then(() => "answered", () => "aborted");
  for (let i = 0; i < 200 && (await metric("refit_running_requests")) === 0; i++) await sleep(10);
  controller.abort();
  assert.equal(await pending, "aborted");
  let running = -1;
  for (let i = 0; i < 200 && running !== 0; i++) {
    await sleep(25);
    running = await metric("refit_running_requests");
  }
  assert.equal(running, 0);
  // ignore_eos: a generation nobody stopped would have made all 1500 tokens.
  const generated = (await metric("refit_generation_tokens_total")) - before;
  assert.ok(generated < 1500, `${generated} tokens generated for a client that left`);
  assert.equal(await metric("refit_kv_cache_blocks_used"), 0);
  const ok = await client.completions.create({ model: "tiny", prompt, max_tokens: 4, temperature: 0 });
  assert.equal(ok.choices[0].token_ids.length, 4);
});

server.kill("SIGTERM");
fs.rmSync(work, { recursive: true, force: true });
console.log(failures ? `${failures} test(s) failed` : "all passed");
process.exit(failures ? 1 : 0);
