#!/usr/bin/python3
"""SGLang's /generate and the lifecycle routes against a real `refit serve` (argv[1]: the binary).

What it holds refit to:
- /generate speaks SGLang's request and response (sglang io_struct.py GenerateReqInput,
  tokenizer_manager.py meta_info, schedule_batch.py FINISH_*.to_json), single and batched,
  n > 1 expanded as SGLang expands it, streaming as SGLang streams;
- greedy /generate equals /v1/completions token for token and logprob for logprob;
- rescoring a sampled sequence in one prefill (max_new_tokens 0, logprob_start_len)
  returns the sampled tokens' logprobs bit for bit, in SGLang's logprob semantics and in
  vLLM's raw mode (prompt_logprobs on /v1/completions);
- the same sampling_seed gives the same tokens alone and inside a batch;
- /abort_request by rid, /flush_cache refused while requests run, /health_generate,
  server and model info; release/resume of KV and weights with real effect (RSS drops,
  generation refused until the weights are sent again, then bitwise the original);
- unknown fields are ignored; malformed known fields get a 4xx naming them and the server
  keeps serving.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, "..", "shared", "oracle")
STORIES = os.path.join(SHARED, "stories260K", "stories260K.gguf")
LLAMA = os.path.join(SHARED, "llamacpp", "llama-f32", "micro-llama-f32-s1.gguf")
LLAMA_Q8 = os.path.join(SHARED, "llamacpp", "llama-q8_0", "micro-llama-q8_0-s1.gguf")
failures = []
JSON = {"Content-Type": "application/json"}  # the server reads JSON bodies only


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def Server(model, *extra, tp=1):
    return RefitServer(REFIT, model, *extra, tp=tp)


def gen(server, body):
    status, j = server.post("/generate", body)
    check(status == 200, f"/generate {json.dumps(body)[:200]} -> {status} {j}")
    return j


PROMPT = [1, 403, 407, 261, 378, 295, 262]

s = Server(STORIES)
try:
    # ---- the response shape, greedy = /v1/completions ----
    j = gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0}, "return_logprob": True,
                "top_logprobs_num": 3, "return_text_in_logprobs": True, "rid": "r-greedy"})
    meta = j["meta_info"]
    for key in ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "weight_version",
                "e2e_latency", "output_token_logprobs", "input_token_logprobs", "output_top_logprobs",
                "input_top_logprobs", "weight_versions"):
        check(key in meta, f"meta_info lacks {key}: {sorted(meta)}")
    check(meta["id"] == "r-greedy", f"rid not echoed: {meta['id']}")
    check(meta["finish_reason"] == {"type": "length", "length": 12}, f"finish_reason {meta['finish_reason']}")
    check(meta["prompt_tokens"] == len(PROMPT) and meta["completion_tokens"] == 12, f"token counts {meta}")
    check(len(j["output_ids"]) == 12 and isinstance(j["text"], str) and j["text"], f"output {j}")
    out_lp = meta["output_token_logprobs"]
    check([e[1] for e in out_lp] == j["output_ids"], "output_token_logprobs ids differ from output_ids")
    check(all(isinstance(e[2], str) for e in out_lp), "return_text_in_logprobs gave no text")
    check(all(len(t) == 3 and t[0][0] >= t[1][0] >= t[2][0] for t in meta["output_top_logprobs"]), "top logprobs")
    check(all(t[0][1] == e[1] for t, e in zip(meta["output_top_logprobs"], out_lp)), "greedy token is not the top one")
    check(meta["input_token_logprobs"] == [], "logprob_start_len -1 must give no input logprobs")
    check(meta["weight_versions"] == ["1"] * 12, f"per-token weight versions {meta['weight_versions']}")
    status, c = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "logprobs": 0})
    check(status == 200 and c["choices"][0]["token_ids"] == j["output_ids"], "greedy /generate != /v1/completions")
    check(c["choices"][0]["logprobs"]["token_logprobs"] == [e[0] for e in out_lp],
          "greedy /generate logprobs are not /v1/completions' raw logprobs bit for bit")
    check(j["text"] == c["choices"][0]["text"], "text differs between /generate and /v1/completions")

    # text prompts: the tokenizer adds BOS, as SGLang's does
    t = gen(s, {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
    check(t["meta_info"]["prompt_tokens"] >= 4 and len(t["output_ids"]) == 8, f"text prompt {t['meta_info']}")

    # ---- the headline: rescoring a sampled sequence returns its logprobs bit for bit ----
    for temperature in (1.0, 0.7):
        sp = {"max_new_tokens": 24, "temperature": temperature, "top_k": 20, "top_p": 0.9, "sampling_seed": 1234,
              "ignore_eos": True}
        a = gen(s, {"input_ids": PROMPT, "sampling_params": sp, "return_logprob": True})
        sampled = [e[0] for e in a["meta_info"]["output_token_logprobs"]]
        full = PROMPT + a["output_ids"]
        score = gen(s, {"input_ids": full, "return_logprob": True, "logprob_start_len": len(PROMPT),
                        "sampling_params": {"max_new_tokens": 0, "temperature": temperature}})
        check(score["output_ids"] == [] and score["meta_info"]["finish_reason"]["type"] == "length", "scoring generated")
        ilp = score["meta_info"]["input_token_logprobs"]
        check([e[1] for e in ilp] == a["output_ids"], f"scored ids {[e[1] for e in ilp]} != {a['output_ids']}")
        check([e[0] for e in ilp] == sampled, f"T={temperature}: rescored logprobs differ from the sampled ones:\n"
              f"{[e[0] for e in ilp]}\n{sampled}")
        # and again with the prefix cache warm (a prefix hit is bitwise neutral)
        again = gen(s, {"input_ids": full, "return_logprob": True, "logprob_start_len": len(PROMPT),
                        "sampling_params": {"max_new_tokens": 0, "temperature": temperature}})
        check(again["meta_info"]["input_token_logprobs"] == ilp, "rescoring twice differs")
    # vLLM's side: raw logprobs of sampled tokens = prompt_logprobs of the full sequence
    status, c = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 16, "temperature": 0.8, "seed": 7,
                                           "logprobs": 0, "ignore_eos": True})
    toks, lps = c["choices"][0]["token_ids"], c["choices"][0]["logprobs"]["token_logprobs"]
    status, r = s.post("/v1/completions", {"prompt": PROMPT + toks, "max_tokens": 1, "temperature": 0,
                                           "prompt_logprobs": 0})
    pl = r["choices"][0]["prompt_logprobs"]
    check(status == 200 and pl[0] is None and len(pl) == len(PROMPT) + len(toks), f"prompt_logprobs shape {status}")
    rescored = [pl[len(PROMPT) + i][str(tk)]["logprob"] for i, tk in enumerate(toks)]
    check(rescored == lps, f"vLLM raw: rescored {rescored} != sampled {lps}")
    # echo + logprobs: the prompt's tokens lead, the first with null
    status, e = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "temperature": 0, "logprobs": 1, "echo": True})
    elp = e["choices"][0]["logprobs"]
    check(status == 200 and len(elp["tokens"]) == len(PROMPT) + 2 and elp["token_logprobs"][0] is None
          and all(x is not None for x in elp["token_logprobs"][1:]), f"echo logprobs {status} {elp}")
    check(elp["token_logprobs"][1:len(PROMPT)] == [pl[i][str(PROMPT[i])]["logprob"] for i in range(1, len(PROMPT))],
          "echo logprobs differ from prompt_logprobs")
    # top logprobs beyond 20 where asked
    big = gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2, "temperature": 0},
                  "return_logprob": True, "top_logprobs_num": 50})
    check(all(len(x) == 50 for x in big["meta_info"]["output_top_logprobs"]), "top_logprobs_num 50")

    # ---- batches, n, seeds, rids ----
    b = gen(s, {"input_ids": [PROMPT, PROMPT[:4]], "rid": "batch",
                "sampling_params": {"max_new_tokens": 6, "temperature": 1.0, "sampling_seed": 99, "n": 2}})
    check(isinstance(b, list) and len(b) == 4, f"batch of 2 with n=2 gave {type(b)} {len(b)}")
    check([x["meta_info"]["id"] for x in b] == ["batch_0", "batch_1", "batch_2", "batch_3"], "batch rids")
    check([x["meta_info"]["prompt_tokens"] for x in b] == [7, 4, 7, 4], "SGLang's expansion order [p0, p1, p0, p1]")
    alone = gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 6, "temperature": 1.0, "sampling_seed": 99}})
    check(alone["output_ids"] == b[0]["output_ids"], "the same sampling_seed gave other tokens inside a batch")
    seeded1 = gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 6, "temperature": 1.0, "sampling_seed": 100}})
    check(seeded1["output_ids"] == b[2]["output_ids"], "sample j of a prompt must draw with sampling_seed + j")
    sp = {"max_new_tokens": 5, "temperature": 0}
    bl = gen(s, {"input_ids": [PROMPT, PROMPT[:3]], "sampling_params": [sp, {**sp, "max_new_tokens": 3}],
                 "return_logprob": [True, False]})
    check(len(bl[1]["output_ids"]) == 3 and "output_token_logprobs" in bl[0]["meta_info"]
          and "output_token_logprobs" not in bl[1]["meta_info"], "per-prompt sampling_params / return_logprob")

    # ---- stops ----
    g = j["output_ids"]
    st = gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0, "stop_token_ids": [g[3]]}})
    check(st["output_ids"] == g[:4] and st["meta_info"]["finish_reason"] == {"type": "stop", "matched": g[3]},
          f"stop_token_ids: {st['output_ids']} {st['meta_info']['finish_reason']}")
    mn = gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0,
                                                           "stop_token_ids": [g[3]], "min_new_tokens": 6}})
    check(len(mn["output_ids"]) >= 6 and g[3] not in mn["output_ids"][:6], f"min_new_tokens: {mn['output_ids']}")
    word = j["text"].split()[2] if len(j["text"].split()) > 2 else j["text"][-3:]
    ss = gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0, "stop": [word]}})
    fr = ss["meta_info"]["finish_reason"]
    check(fr == {"type": "stop", "matched": word} and word not in ss["text"], f"stop string {word!r}: {fr} {ss['text']!r}")
    kept = gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0, "stop": [word],
                                                             "no_stop_trim": True}})
    check(kept["text"].endswith(word), f"no_stop_trim kept {kept['text']!r}")

    # ---- streaming: cumulative chunks, then [DONE]; the last equals the non-streamed answer ----
    events = s.stream("/generate", {"input_ids": PROMPT, "stream": True, "return_logprob": True,
                                    "sampling_params": {"max_new_tokens": 12, "temperature": 0}})
    check(events and events[-1] == "[DONE]", f"stream did not end with [DONE]: {events[-2:]}")
    chunks = [json.loads(x) for x in events[:-1]]
    # Chunks carry everything so far; like SGLang's, several tokens may share one chunk when
    # the client reads slower than the engine generates (the long stream below has many).
    check(chunks and all(chunks[i]["output_ids"] == chunks[i + 1]["output_ids"][:len(chunks[i]["output_ids"])]
                         for i in range(len(chunks) - 1)), "stream chunks are not cumulative")
    check(chunks[-1]["output_ids"] == j["output_ids"] and chunks[-1]["text"] == j["text"], "streamed result differs")
    check(chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
          and all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1]), "stream finish reasons")

    # ---- abort by rid mid-generation, flush_cache refused while it runs ----
    # A streamed request is frozen mid-generation by an in_place pause, so nothing races.
    long_req = {"input_ids": PROMPT, "rid": "long-one", "stream": True,
                "sampling_params": {"max_new_tokens": 1500, "temperature": 0, "ignore_eos": True}}
    started = threading.Event()
    chunks_seen = []

    def stream_long():
        req = urllib.request.Request(f"http://127.0.0.1:{s.port}/generate", data=json.dumps(long_req).encode(),
                                     headers=JSON)
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks_seen.append(json.loads(line[6:]))
                    if not started.is_set():
                        s.post("/pause_generation", {"mode": "in_place"})
                        started.set()

    th = threading.Thread(target=stream_long)
    th.start()
    check(started.wait(60), "the long request never produced a token")
    fstatus, fbody = s.get("/flush_cache")
    check(fstatus == 400 and "pending" in json.dumps(fbody), f"/flush_cache while a request runs: {fstatus} {fbody}")
    status, ab = s.post("/abort_request", {"rid": "long-one"})
    check(status == 200 and ab.get("aborted") == 1, f"/abort_request: {status} {ab}")
    # slime polls /v1/loads after abort_all until the server is idle: even while paused
    # the aborted request leaves (server_control.py abort_server_until_idle).
    idle = False
    for _ in range(50):
        status, loads = s.get("/v1/loads?include=core,disagg,queues")
        if status == 200 and loads["loads"][0]["num_total_reqs"] == 0:
            idle = True
            break
        time.sleep(0.05)
    check(idle, f"/v1/loads never showed the aborted request gone: {status} {loads}")
    check(s.post("/continue_generation")[0] == 200, "continue_generation")
    th.join(60)
    last = chunks_seen[-1] if chunks_seen else {}
    check(last.get("meta_info", {}).get("finish_reason", {}).get("type") == "abort"
          and len(last["output_ids"]) < 1500, f"aborted request ended with {str(last)[:300]}")
    check(len(chunks_seen) >= 2 and chunks_seen[0]["meta_info"]["finish_reason"] is None
          and all(chunks_seen[i]["output_ids"] == chunks_seen[i + 1]["output_ids"][:len(chunks_seen[i]["output_ids"])]
                  for i in range(len(chunks_seen) - 1)), "the long stream's chunks are not cumulative")
    for _ in range(50):
        fstatus, _ = s.get("/flush_cache")
        if fstatus == 200:
            break
        time.sleep(0.1)
    check(fstatus == 200, "/flush_cache never succeeded once idle")
    check(s.post("/flush_cache")[0] == 200, "POST /flush_cache")
    status, ab = s.post("/abort_request", {"abort_all": True})
    check(status == 200, f"abort_all {status}")

    # ---- vLLM's /pause: by default in-flight requests end (abort); with
    # wait_for_inflight_requests they finish first, and /pause answers after them ----
    for wait in (False, True):
        req = {"input_ids": PROMPT, "stream": True,
               "sampling_params": {"max_new_tokens": 1500, "temperature": 0, "ignore_eos": True}}
        seen, paused = [], {}

        def stream_and_pause():
            r = urllib.request.Request(f"http://127.0.0.1:{s.port}/generate", data=json.dumps(req).encode(),
                                       headers=JSON)
            pauser = None
            with urllib.request.urlopen(r, timeout=120) as resp:
                for line in resp:
                    line = line.decode().strip()
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    seen.append(json.loads(line[6:]))
                    if pauser is None:  # mid-generation: pause now
                        def pause():
                            paused["status"] = s.post("/pause" + ("?wait_for_inflight_requests=true" if wait else ""))[0]
                            paused["loads"] = s.get("/v1/loads")[1]["loads"][0]["num_total_reqs"]
                        pauser = threading.Thread(target=pause)
                        pauser.start()
            pauser.join(60)

        th = threading.Thread(target=stream_and_pause)
        th.start()
        th.join(90)
        fr = seen[-1]["meta_info"]["finish_reason"]["type"] if seen else None
        check(paused.get("status") == 200 and s.get("/is_paused")[1] == {"is_paused": True}, f"/pause (wait {wait})")
        check(fr == ("length" if wait else "abort"), f"/pause (wait {wait}): the in-flight request ended with {fr}")
        check(paused.get("loads") == 0, f"/pause (wait {wait}) answered with {paused.get('loads')} requests left")
        check(s.post("/resume")[0] == 200 and s.get("/is_paused")[1] == {"is_paused": False}, "/resume")
    status, _ = s.post("/pause?wait_for_inflight_requests=maybe")
    check(status == 400, f"/pause with a malformed flag: {status}")

    # ---- health and info ----
    status, h = s.get("/health_generate")
    check(status == 200 and h["status"] == "ok", f"/health_generate {status} {h}")
    for path in ("/get_server_info", "/server_info"):
        status, info = s.get(path)
        check(status == 200 and info["tp_size"] == 1 and info["context_length"] > 0 and "weight_version" in info
              and "max_running_requests" in info, f"{path}: {status} {info}")
    status, mi = s.get("/get_model_info")
    check(status == 200 and mi["is_generation"] is True and "model_path" in mi, f"/get_model_info {status} {mi}")

    # ---- unknown fields are ignored; malformed known ones are 400 naming them ----
    u = gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3, "temperature": 0, "future_knob": 1},
                "return_routed_experts": False, "bootstrap_room": None, "custom_labels": {"a": "b"}})
    check(u["output_ids"] == g[:3], "unknown fields changed the answer")
    for body, field in [({"text": "x", "input_ids": [1]}, "input_ids"),
                        ({"input_ids": PROMPT, "sampling_params": {"temperature": "hot"}}, "temperature"),
                        ({"input_ids": PROMPT, "sampling_params": {"top_k": 0}}, "top_k"),
                        ({"input_ids": PROMPT, "return_logprob": True, "logprob_start_len": 99}, "logprob_start_len"),
                        ({"input_ids": [-1]}, "input_ids"),
                        ({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": -2}}, "max_new_tokens"),
                        ({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2**63 - 1}}, "max_new_tokens"),
                        ({"input_ids": PROMPT, "sampling_params": {"regex": "a+"}}, "regex"),
                        ({"input_ids": [PROMPT], "sampling_params": [{}, {}]}, "sampling_params"),
                        ({"input_ids": PROMPT, "image_data": "x.png"}, "image_data")]:
        status, err = s.post("/generate", body)
        check(400 <= status < 500 and field in json.dumps(err), f"bad {body} -> {status} {err}")
    status, tiny = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "temperature": 1e-38, "logprobs": 0})
    check(status == 200 and tiny["choices"][0]["token_ids"] == g, f"temperature 1e-38 is not greedy: {tiny}")
    status, err = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2**63 - 1})
    check(status == 400 and "max_tokens" in json.dumps(err), f"/v1/completions max_tokens 2^63-1 -> {status} {err}")
    # 1e999 is valid JSON that parses to infinity: a 400 naming the field, not a 500.
    for path, raw in [("/v1/completions", b'{"prompt": [1, 2], "max_tokens": 2, "temperature": 1e999}'),
                      ("/generate", b'{"input_ids": [1, 2], "sampling_params": {"temperature": 1e999}}')]:
        status, err = s.post(path, raw=raw)
        check(status == 400 and "temperature" in json.dumps(err) and "not valid JSON" not in json.dumps(err),
              f"{path} temperature 1e999 -> {status} {err}")
    # A body over a route's limit is refused by its declared length, before it is read.
    import socket
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 70000000\r\n\r\n{\"text\": \"aaaa")
        answer = ""
        while "}}" not in answer:  # headers and the JSON body may come in separate segments
            part = sock.recv(4096)
            if not part:
                break
            answer += part.decode(errors="replace")
    check(answer.startswith("HTTP/1.1 413") and "limit" in answer, f"a 70 MB /generate body -> {answer[:200]!r}")
    status, err = s.post("/generate", raw=b"{not json")
    check(status == 400, f"broken JSON -> {status}")
    # A body nested a million levels deep is refused while parsing (it once overflowed the
    # stack of the JSON serializer and killed the server), on every route.
    # (Other routes take 1 MiB bodies: 400,000 levels there.)
    for path in ("/generate", "/v1/completions", "/update_weights_from_disk", "/abort_request"):
        depth = 1_000_000 if path in ("/generate", "/v1/completions") else 400_000
        deep = b'{"input_ids": ' + b"[" * depth + b"]" * depth + b"}"
        status, err = s.post(path, raw=deep)
        check(status == 400 and "nests deeper" in json.dumps(err), f"{path} with a deep body -> {status} {str(err)[:200]}")
    for path, body in [("/abort_request", {}), ("/abort_request", {"rid": 3}),
                       ("/release_memory_occupation", {"tags": ["gpu"]}), ("/pause_generation", {"mode": "sideways"})]:
        status, err = s.post(path, body)
        check(400 <= status < 500, f"{path} {body} -> {status} {err}")
    status, v1 = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "cache_salt": "x",
                                            "return_tokens_as_token_ids": True, "logprobs": 1, "skip_special_tokens": True,
                                            "stop_token_ids": [], "some_new_vllm_field": {"x": 1}})
    check(status == 200 and v1["choices"][0]["logprobs"]["tokens"] == [f"token_id:{x}" for x in g[:3]],
          f"vLLM extras: {status} {v1}")
    check(gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3, "temperature": 0}})["output_ids"] == g[:3],
          "the server changed its answer after bad requests")

    # ---- vLLM's /tokenize and /detokenize ----
    status, tk = s.post("/tokenize", {"prompt": "Once upon a time"})
    check(status == 200 and tk["count"] == len(tk["tokens"]) == t["meta_info"]["prompt_tokens"] and tk["tokens"][0] == 1,
          f"/tokenize (the /generate text prompt had {t['meta_info']['prompt_tokens']} tokens): {status} {tk}")
    status, dt = s.post("/detokenize", {"tokens": tk["tokens"]})
    check(status == 200 and dt["prompt"].strip() == "Once upon a time", f"/detokenize: {status} {dt}")
    status, tkc = s.post("/tokenize", {"messages": [{"role": "user", "content": "Hi"}]})
    check(status == 200 and tkc["count"] > 0, f"/tokenize messages: {status} {tkc}")
    for path, body in [("/tokenize", {}), ("/tokenize", {"prompt": 3}), ("/detokenize", {"tokens": [99999]}),
                       ("/detokenize", {"tokens": "x"}), ("/update_weights", {}), ("/update_weights", {"model_path": ""})]:
        status, err = s.post(path, body)
        check(400 <= status < 500, f"{path} {body} -> {status} {err}")

    # ---- memory: KV release gives memory back and refuses generation; resume restores ----
    rss_before = s.rss_kib()
    status, rel = s.post("/release_memory_occupation", {"tags": ["kv_cache"]})
    check(status == 200 and rel["released_bytes"] > 0, f"release kv: {status} {rel}")
    rss_after = s.rss_kib()
    check(rss_before - rss_after >= rel["released_bytes"] // 1024 // 2,
          f"RSS fell only {rss_before - rss_after} KiB after releasing {rel['released_bytes']} bytes")
    status, err = s.post("/generate", {"input_ids": PROMPT})
    check(status == 503 and "KV cache is released" in json.dumps(err), f"generate while released: {status} {err}")
    check(s.get("/is_sleeping")[1] == {"is_sleeping": True}, "is_sleeping after release")
    check(s.post("/resume_memory_occupation", {"tags": ["kv_cache"]})[0] == 200, "resume kv")
    check(gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0}})["output_ids"] == g,
          "after KV release/resume the answer changed")
    # vLLM sleep level 1 / wake_up
    check(s.post("/sleep?level=1")[0] == 200 and s.get("/is_sleeping")[1]["is_sleeping"], "sleep level 1")
    check(s.post("/wake_up")[0] == 200 and not s.get("/is_sleeping")[1]["is_sleeping"], "wake_up")
    check(gen(s, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0}})["output_ids"] == g,
          "after sleep level 1 the answer changed")
finally:
    s.stop()

# ---- weights release: refused until every tensor is sent again; then bitwise the original ----
w = Server(LLAMA)
try:
    ids = [1, 15043, 3186]
    status, base = w.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 0})
    status, rel = w.post("/release_memory_occupation", {"tags": ["weights"]})
    check(status == 200, f"release weights: {status} {rel}")
    status, err = w.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0})
    check(status == 503 and "weights were released" in json.dumps(err), f"generate after weights release: {status} {err}")
    status, err = w.get("/health_generate")
    check(status == 503, f"/health_generate with released weights: {status}")
    check(w.post("/resume_memory_occupation", {"tags": ["weights"]})[0] == 200, "resume weights")
    status, err = w.post("/generate", {"input_ids": ids})
    check(status == 503, f"generate after resume but before the weights were sent: {status}")
    status, up = w.post("/update_weights_from_disk", {"model_path": LLAMA})
    check(status == 200 and up["success"], f"re-send the weights: {status} {up}")
    status, again = w.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 0})
    check(status == 200 and again["choices"][0]["token_ids"] == base["choices"][0]["token_ids"]
          and again["choices"][0]["logprobs"]["token_logprobs"] == base["choices"][0]["logprobs"]["token_logprobs"],
          "after release + re-send the weights are not bitwise the original")
    # prime-rl's weight routes: /update_weights {model_path} (a folder or file), a refused
    # path changes nothing, /reload_weights goes back to the weights the server started on
    status, up = w.post("/update_weights", {"model_path": LLAMA_Q8})
    check(status == 200 and up["success"], f"/update_weights: {status} {up}")
    status, q8 = w.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 0})
    check(q8["choices"][0]["logprobs"]["token_logprobs"] != base["choices"][0]["logprobs"]["token_logprobs"],
          "/update_weights changed nothing")
    status, bad_up = w.post("/update_weights", {"weight_dir": "/nonexistent/step-3"})
    check(status == 400 and not bad_up["success"] and "nonexistent" in bad_up["message"], f"bad /update_weights: {bad_up}")
    status, same = w.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 0})
    check(same["choices"][0]["logprobs"] == q8["choices"][0]["logprobs"], "a refused /update_weights changed the weights")
    status, rl = w.post("/reload_weights")
    check(status == 200 and rl["success"], f"/reload_weights: {status} {rl}")
    status, again = w.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 0})
    check(again["choices"][0]["logprobs"] == base["choices"][0]["logprobs"], "/reload_weights is not the original")
    # vLLM sleep level 2: the weights go too
    check(w.post("/sleep?level=2")[0] == 200, "sleep level 2")
    check(w.post("/wake_up")[0] == 200, "wake_up after level 2")
    status, _ = w.post("/v1/completions", {"prompt": ids, "max_tokens": 2})
    check(status == 503, f"generation after level-2 sleep without new weights: {status}")
finally:
    w.stop()

# ---- the same under tensor parallelism: every rank releases, and every rank is re-sent ----
if shutil.which("mpirun"):
    t = Server(LLAMA, tp=2)
    try:
        ids = [1, 15043, 3186]
        status, base = t.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 0})
        check(status == 200, f"tp 2 baseline: {status}")
        workers = t.worker_pids()
        check(len(workers) == 1, f"tp 2: expected one worker rank, found {workers}")
        before = [t.rss_kib(p) for p in workers]
        status, rel = t.post("/release_memory_occupation", {})
        check(status == 200, f"tp 2 release: {status} {rel}")
        time.sleep(0.2)  # the worker releases when the command reaches it
        after = [t.rss_kib(p) for p in workers]
        check(all(b - a >= rel["released_bytes"] // 1024 // 4 for b, a in zip(before, after)),
              f"tp 2: the worker's RSS {before} -> {after} KiB; the lead released {rel['released_bytes']} bytes")
        status, _ = t.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0})
        check(status == 503, f"tp 2 generation after release: {status}")
        check(t.post("/resume_memory_occupation", {})[0] == 200, "tp 2 resume")
        status, up = t.post("/update_weights_from_disk", {"model_path": LLAMA})
        check(status == 200 and up["success"], f"tp 2 re-send: {status} {up}")
        status, again = t.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 0})
        check(status == 200 and again["choices"][0]["token_ids"] == base["choices"][0]["token_ids"]
              and again["choices"][0]["logprobs"]["token_logprobs"] == base["choices"][0]["logprobs"]["token_logprobs"],
              f"tp 2 after release + re-send: {again} vs {base}")
    finally:
        t.stop()
else:
    print("mpirun not found: the tensor-parallel release check is skipped")

# ---- --logprobs-mode: processed logprobs renormalise over the truncated set ----
m = Server(STORIES, "--logprobs-mode", "processed_logprobs")
try:
    a = gen(m, {"input_ids": PROMPT, "return_logprob": True, "top_logprobs_num": 3,
                "sampling_params": {"max_new_tokens": 8, "temperature": 1.0, "top_k": 2, "sampling_seed": 5}})
    for top in a["meta_info"]["output_top_logprobs"]:
        check(top[2][0] is None, f"processed_logprobs with top_k 2: the third must be -inf (null), got {top}")
        check(abs(sum(2.718281828459045 ** x[0] for x in top[:2]) - 1) < 1e-5, f"top-2 probabilities sum to 1: {top}")
    status, info = m.get("/get_server_info")
    check(info["logprobs_mode"] == "processed_logprobs", f"server info logprobs_mode {info['logprobs_mode']}")
finally:
    m.stop()

# ---- SIGTERM: requests in flight finish (drain), a paused server still exits and its
# frozen requests are answered ("abort"), a second signal exits at once ----
def long_stream(server, box):
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/generate", data=json.dumps(
        {"input_ids": PROMPT, "stream": True, "sampling_params": {"max_new_tokens": 1500, "temperature": 0,
                                                                   "ignore_eos": True}}).encode(),
                                 headers=JSON)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    box.append(json.loads(line[6:]))
    except Exception as e:  # noqa: BLE001 - what the client saw is checked below
        box.append({"error": str(e)})


for paused in (False, True):
    d = Server(STORIES)
    box = []
    th = threading.Thread(target=long_stream, args=(d, box))
    th.start()
    for _ in range(400):
        if box:
            break
        time.sleep(0.005)
    if paused:
        d.post("/pause_generation", {"mode": "in_place"})
    t0 = time.time()
    os.kill(d.pid, signal.SIGTERM)
    try:
        rc = d.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        d.proc.kill()
        rc = "timeout"
    th.join(30)
    last = box[-1] if box else {}
    want = "abort" if paused else "length"
    check(rc == 0, f"SIGTERM (paused {paused}): exit {rc} after {time.time() - t0:.1f} s")
    check(last.get("meta_info", {}).get("finish_reason", {}).get("type") == want,
          f"SIGTERM (paused {paused}): the request in flight ended with {str(last)[:200]}, wanted {want}")

# A drain with work left (8 long streams, a 60 s shutdown timeout): the second signal
# exits at once with 130.
d = Server(STORIES, "--shutdown-timeout", "60")
boxes = [[] for _ in range(8)]
threads = [threading.Thread(target=long_stream, args=(d, b)) for b in boxes]
for th in threads:
    th.start()
for _ in range(400):
    if all(boxes):
        break
    time.sleep(0.005)
os.kill(d.pid, signal.SIGTERM)
time.sleep(0.1)
drained_early = d.proc.poll() is not None
os.kill(d.pid, signal.SIGTERM)
try:
    rc = d.proc.wait(timeout=30)
except subprocess.TimeoutExpired:
    d.proc.kill()
    rc = "timeout"
for th in threads:
    th.join(30)
print(f"second SIGTERM during the drain: exit {rc} (drained before it: {drained_early})")
check(drained_early or rc == 130, f"a second SIGTERM during the drain: exit {rc}")

if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print("sglang generate and lifecycle: all checks passed")
