#!/usr/bin/python3
"""RL clients' HTTP request sequences replayed against a real `refit serve` (CTest runs this
file; argv[1] is the refit binary).

Each replay builds its requests the way the named upstream file does (cited above each one)
and checks what that client reads from the answers: every key it indexes, with the type it
expects, plus status codes, finish reasons, greedy determinism and logprob consistency.

  * slime (THUDM/slime): /generate payload and meta_info reading, health/flush start-up
    sequence, abort_all, offload/onload and the disk weight-reload control flow.
  * AReaL (inclusionAI/AReaL): SGLang backend payload and the abort-resume loop of
    RemoteInfEngine.agenerate, replayed against a concurrent trainer (pause, disk update,
    continue) that switches the served weights from micro-llama F32 to its Q8_0 twin mid
    generation; the tokens after the switch must equal what a fresh Q8_0 server generates
    from the same accumulated prefix.
  * verl (volcengine/verl): HttpServerAdapter's calls in the order the rollout makes them.
  * prime-rl (PrimeIntellect-ai/prime-rl): its vLLM chat-completions request (extra_body
    fields, cache_salt) and the token_id:N parsing of logprobs.content.
  * AReaL's vLLM backend: /v1/completions with return_tokens_as_token_ids.

Models: stories260K (Hugging Face folder + its llama2.c tokenizer) and micro-llama F32/Q8_0
(GGUF, prompts as token ids). Servers start with `--port 0 -t 1` (port read from stdout's
first line, as tests/cli/serve_tp_test.py does).
"""
import os
import re
import sys
import threading
import time
import traceback

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, "..", "shared", "oracle")
STORIES_HF = os.path.join(SHARED, "stories260K", "hf")
STORIES_TOK = os.path.join(SHARED, "stories260K", "tok512.bin")
STORIES_REF = os.path.join(SHARED, "stories260K", "llama2c", "llama2c_once_upon_a_time.tokens.txt")
LLAMA = os.path.join(SHARED, "llamacpp", "llama-f32", "micro-llama-f32-s1.gguf")
LLAMA_Q8 = os.path.join(SHARED, "llamacpp", "llama-q8_0", "micro-llama-q8_0-s1.gguf")
LLAMA_REF = os.path.join(SHARED, "llamacpp", "llama-f32", "once_upon_a_time.tokens.txt")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return bool(cond)


def is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def stories_reference():
    """llama2.c's greedy run of stories260K: (prompt ids with BOS, generated ids)."""
    kv = {}
    with open(STORIES_REF) as f:
        for line in f:
            if not line.startswith("#"):
                k, _, v = line.partition(":")
                kv[k.strip()] = [int(x) for x in v.split()]
    prompt = kv["prompt_tokens"]
    return prompt, kv["sequence"][len(prompt):]


def llama_reference():
    """llama.cpp's greedy run of micro-llama F32: (prompt ids, generated ids)."""
    kv = {}
    with open(LLAMA_REF) as f:
        for line in f:
            k, _, v = line.partition(":")
            kv[k] = v.strip()
    return [int(x) for x in kv["prompt_ids"].split()], [int(x) for x in kv["generated_ids"].split()]


class Server(RefitServer):
    def __init__(self, model, *extra):
        super().__init__(REFIT, model, *extra)

    def metric(self, name):
        status, text = self.get("/metrics")
        m = re.search(rf"^{re.escape(name)} (\S+)$", text if isinstance(text, str) else "", re.M)
        return float(m.group(1)) if m else None

    def wait_generated(self, base, more, timeout=30):
        """Until the server has generated `more` tokens beyond `base` (its /metrics counter)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = self.metric("refit_generation_tokens_total")
            if v is not None and v >= base + more:
                return True
            time.sleep(0.005)
        return False

    def stop(self):
        rc = super().stop()
        check(rc == 0, f"server {self.model} exited with {rc}: {''.join(self.stderr)[-2000:]}")


def in_thread(fn, *args):
    """Runs fn(*args) in a thread; returns (thread, box) where box[0] is the result."""
    box = [None]

    def run():
        try:
            box[0] = fn(*args)
        except Exception as e:  # recorded, asserted by the caller
            box[0] = e

    t = threading.Thread(target=run)
    t.start()
    return t, box


# --------------------------------------------------------------------------------------
# Shape checks: what each client indexes.


def check_sglang_generate(j, what, return_logprob=True):
    """The keys SGLang clients index in a /generate answer (slime, AReaL, verl)."""
    ok = check(isinstance(j, dict) and isinstance(j.get("meta_info"), dict), f"{what}: no meta_info: {j}")
    if not ok:
        return False
    mi = j["meta_info"]
    ok &= check(isinstance(j.get("text"), str), f"{what}: text is not a string: {j.get('text')!r}")
    ok &= check(isinstance(j.get("output_ids"), list), f"{what}: output_ids is not a list")
    fr = mi.get("finish_reason")
    ok &= check(isinstance(fr, dict) and fr.get("type") in ("stop", "length", "abort"),
                f"{what}: finish_reason {fr!r}")
    for k in ("prompt_tokens", "completion_tokens", "cached_tokens"):
        ok &= check(isinstance(mi.get(k), int) and not isinstance(mi.get(k), bool), f"{what}: meta_info.{k} = {mi.get(k)!r}")
    ok &= check(isinstance(mi.get("weight_version"), str), f"{what}: meta_info.weight_version = {mi.get('weight_version')!r}")
    wv = mi.get("weight_versions")
    ok &= check(isinstance(wv, list) and len(wv) == len(j.get("output_ids", [])) and all(isinstance(v, str) for v in wv),
                f"{what}: meta_info.weight_versions {wv!r} is not one label per output token")
    if return_logprob:
        otl = mi.get("output_token_logprobs")
        ok &= check(isinstance(otl, list) and all(isinstance(x, list) and len(x) >= 2 and is_num(x[0]) and isinstance(x[1], int)
                                                  for x in otl),
                    f"{what}: output_token_logprobs is not [[logprob, id, ...]]: {otl!r}"[:400])
        if ok:
            ok &= check([x[1] for x in otl] == j["output_ids"], f"{what}: output_token_logprobs ids != output_ids")
            ok &= check(len(otl) == mi["completion_tokens"], f"{what}: {len(otl)} logprobs for {mi['completion_tokens']} tokens")
    return bool(ok)


# --------------------------------------------------------------------------------------
# slime


# slime/rollout/sglang_rollout.py GenerateState.__init__ (THUDM/slime 624b824a): the
# sampling params every rollout request carries (rollout_top_k defaults to -1, rollout_stop
# and rollout_stop_token_ids to None); generate_and_rm_group adds sampling_seed =
# rollout_seed + index with --sglang-enable-deterministic-inference.
def slime_sampling_params(max_new_tokens, temperature=1.0, seed=None):
    sp = dict(temperature=temperature, top_p=1.0, top_k=-1, max_new_tokens=max_new_tokens, stop=None,
              stop_token_ids=None, skip_special_tokens=True, no_stop_trim=True, spaces_between_special_tokens=False)
    if seed is not None:
        sp["sampling_seed"] = seed
    return sp


# slime/rollout/sglang_rollout.py generate(): payload {sampling_params, return_logprob: True,
# input_ids}; reads meta_info.output_token_logprobs (item[1] the id, item[0] the logprob)
# and output["text"]; slime/utils/types.py Sample.update_from_meta_info / _apply_meta_info
# read meta_info cached_tokens, prompt_tokens (.get), weight_version and
# finish_reason["type"] (length -> TRUNCATED, abort -> ABORTED, stop -> COMPLETED).
def slime_generate(s, prompt_ids, sampling_params, what):
    payload = {"sampling_params": sampling_params, "return_logprob": True, "input_ids": prompt_ids}
    status, out = s.post("/generate", payload)
    check(status == 200, f"slime {what}: /generate answered {status}: {out}")
    if status != 200 or not check_sglang_generate(out, f"slime {what}"):
        return None
    mi = out["meta_info"]
    tokens = [item[1] for item in mi["output_token_logprobs"]]
    logprobs = [item[0] for item in mi["output_token_logprobs"]]
    status_map = {"length": "TRUNCATED", "abort": "ABORTED", "stop": "COMPLETED"}
    return {"tokens": tokens, "log_probs": logprobs, "text": out["text"], "status": status_map[mi["finish_reason"]["type"]],
            "weight_version": mi["weight_version"], "meta_info": mi}


# slime/backends/sglang_utils/sglang_engine.py SGLangEngine.flush_cache: GET /flush_cache
# up to 60 times, one second apart, until 200 (it is refused while requests are pending).
def slime_flush_cache(s):
    for attempt in range(60):
        status, _ = s.get("/flush_cache")
        if status == 200:
            return attempt + 1
        time.sleep(1)
    raise TimeoutError("Timeout while flushing cache.")


def replay_slime(s, micro):
    prompt, reference = stories_reference()
    # sglang_engine.py _wait_server_healthy: GET /health_generate until 200.
    for _ in range(30):
        status, j = s.get("/health_generate")
        if status == 200:
            break
        time.sleep(0.2)
    check(status == 200, f"slime: /health_generate never answered 200: {status} {j}")
    # slime/backends/sglang_utils/external.py get_server_info: /server_info, then
    # /get_server_info; _sanity_check_server_args compares its fields (tp_size, dp_size, ...).
    for path in ("/server_info", "/get_server_info"):
        status, info = s.get(path)
        check(status == 200 and isinstance(info, dict) and info.get("tp_size") == 1 and info.get("dp_size") == 1,
              f"slime: {path}: {status} {info}")

    # A group of two samples with deterministic inference: seeds 42 and 43, temperature 1.
    group = [slime_generate(s, prompt, slime_sampling_params(24, seed=42 + i), f"group sample {i}") for i in range(2)]
    again = slime_generate(s, prompt, slime_sampling_params(24, seed=42), "group sample 0 again")
    if all(group) and again:
        check(again["tokens"] == group[0]["tokens"] and again["log_probs"] == group[0]["log_probs"],
              f"slime: the same sampling_seed gave other tokens: {group[0]['tokens']} then {again['tokens']}")
        check(group[0]["tokens"] != group[1]["tokens"], "slime: sampling seeds 42 and 43 gave the same 24 tokens")
        for g in group:
            check(g["status"] in ("TRUNCATED", "COMPLETED"), f"slime: sample status {g['status']}")
            check(g["meta_info"]["prompt_tokens"] == len(prompt), f"slime: prompt_tokens {g['meta_info']['prompt_tokens']}")
    # Greedy (an eval dataset at temperature 0): llama2.c's tokens; twice the same.
    greedy = slime_generate(s, prompt, slime_sampling_params(24, temperature=0.0), "greedy")
    greedy2 = slime_generate(s, prompt, slime_sampling_params(24, temperature=0.0), "greedy again")
    if greedy and greedy2:
        check(greedy["tokens"] == reference[:24], f"slime greedy: {greedy['tokens']} != llama2.c {reference[:24]}")
        check(greedy2["tokens"] == greedy["tokens"] and greedy2["log_probs"] == greedy["log_probs"],
              "slime greedy: a second identical request differs")
        check(greedy["status"] == "TRUNCATED" and greedy["meta_info"]["finish_reason"].get("length") == 24,
              f"slime greedy: finish {greedy['meta_info']['finish_reason']}")

    # A multi-turn sample re-sends its whole history (prompt + response so far): the
    # repeated prefix is served from the prefix cache and meta_info.cached_tokens says so
    # (Sample.PrefixCacheInfo.add sums it). 45 tokens: the prefix cache works in 16-token blocks.
    long_prompt = prompt + reference[:40]
    first = slime_generate(s, long_prompt, slime_sampling_params(4, temperature=0.0), "long prompt")
    second = slime_generate(s, long_prompt, slime_sampling_params(4, temperature=0.0), "long prompt again")
    if first and second:
        check(0 < second["meta_info"]["cached_tokens"] < len(long_prompt) and second["tokens"] == first["tokens"],
              f"slime: repeated {len(long_prompt)}-token prompt: cached_tokens {second['meta_info']['cached_tokens']}")

    # slime/rollout/sglang_rollout.py abort() -> slime/backends/sglang_utils/server_control.py
    # abort_server_until_idle: POST /abort_request {"abort_all": True}, then GET
    # /v1/loads?include=core (a failure there is logged and ends the loop). The aborted
    # request comes back with finish_reason abort and the tokens it had (partial rollout).
    # On micro-llama (random weights: never EOS in 400 greedy tokens).
    mprompt, _ = llama_reference()
    base = micro.metric("refit_generation_tokens_total")
    t, box = in_thread(slime_generate, micro, mprompt, slime_sampling_params(400, temperature=0.0), "long request")
    check(micro.wait_generated(base, 5), "slime abort: the long request never started")
    # SGLangEngine.flush_cache retries because a flush is refused while requests are pending.
    status, j = micro.get("/flush_cache")
    check(status != 200 and isinstance(j, dict) and j.get("success") is False,
          f"slime: GET /flush_cache with a request running answered {status} {j}")
    status, j = micro.post("/abort_request", {"abort_all": True})
    check(status == 200 and j.get("success") is True, f"slime /abort_request abort_all: {status} {j}")
    t.join(60)
    r = box[0]
    if check(isinstance(r, dict), f"slime abort: the aborted request gave {r!r}"):
        check(r["status"] == "ABORTED" and 0 < len(r["tokens"]) < 400,
              f"slime abort: status {r['status']} with {len(r['tokens'])} tokens")
    status, load = micro.get("/v1/loads?include=core")
    if status == 200:
        n = 0
        for rank in (load.get("loads", [load]) if isinstance(load, dict) else []):
            n += (rank.get("num_running_reqs") or 0) + (rank.get("num_waiting_reqs") or 0)
        check(n == 0, f"slime: /v1/loads after abort_all: {load}")
    else:
        print(f"NOTE: GET /v1/loads answered {status}; slime's abort_server_until_idle logs that and returns")

    # The colocated training step (slime/ray/rollout.py RolloutManager.offload / onload_weights
    # / onload_kv; slime/ray/actor_group.py RayTrainGroup._reload_rollout_weights_from_disk):
    #   offload: SGLangEngine.release_memory_occupation -> flush_cache, POST {} (every tag)
    #   onload_weights: POST /resume_memory_occupation {"tags": ["weights"]}
    #   reload: pause_generation (POST {}), flush_cache, update_weights_from_disk
    #           {model_path, weight_version}, get_weight_version (ci_test: must equal it),
    #           continue_generation (POST {})
    #   onload_kv: POST /resume_memory_occupation {"tags": ["kv_cache", "cuda_graph"]}
    slime_flush_cache(s)
    status, j = s.post("/release_memory_occupation", {})
    check(status == 200 and j.get("success") is True, f"slime offload: {status} {j}")
    status, j = s.post("/generate", {"sampling_params": slime_sampling_params(4), "return_logprob": True, "input_ids": prompt})
    check(status == 503, f"slime: /generate after releasing every tag answered {status}, wanted 503: {j}")
    status, j = s.post("/resume_memory_occupation", {"tags": ["weights"]})
    check(status == 200 and j.get("success") is True, f"slime onload_weights: {status} {j}")
    status, j = s.post("/pause_generation", {})
    check(status == 200, f"slime pause_generation: {status} {j}")
    slime_flush_cache(s)
    status, j = s.post("/update_weights_from_disk", {"model_path": STORIES_HF, "weight_version": "5"})
    check(status == 200 and j.get("success") is True, f"slime update_weights_from_disk: {status} {j}")
    status, j = s.get("/get_weight_version")
    check(status == 200 and str(j.get("weight_version")) == "5", f"slime get_weight_version after the reload: {status} {j}")
    status, j = s.post("/continue_generation", {})
    check(status == 200, f"slime continue_generation: {status} {j}")
    status, j = s.post("/resume_memory_occupation", {"tags": ["kv_cache", "cuda_graph"]})
    check(status == 200 and j.get("success") is True, f"slime onload_kv: {status} {j}")
    after = slime_generate(s, prompt, slime_sampling_params(24, temperature=0.0), "greedy after the reload")
    if after and greedy:
        check(after["tokens"] == greedy["tokens"] and after["log_probs"] == greedy["log_probs"],
              f"slime: greedy after offload/reload of the same weights differs: {after['tokens']} vs {greedy['tokens']}")
        check(after["weight_version"] == "5" and set(after["meta_info"]["weight_versions"]) == {"5"},
              f"slime: meta_info.weight_version after the reload {after['weight_version']}")
    status, j = s.get("/health_generate")
    check(status == 200, f"slime health_generate after onload: {status} {j}")


# --------------------------------------------------------------------------------------
# verl


# verl/workers/rollout/sglang_rollout/http_server_engine.py (volcengine/verl b178a3cd):
# HttpServerAdapter.generate: payload {text, sampling_params, input_ids, image_data,
# return_logprob, logprob_start_len, top_logprobs_num, token_ids_logprob, lora_path,
# custom_logit_processor} with the None values filtered out; POST /generate.
def verl_generate(s, input_ids, sampling_params, return_logprob=True, top_logprobs_num=None):
    payload = {"text": None, "sampling_params": sampling_params, "input_ids": input_ids, "image_data": None,
               "return_logprob": return_logprob, "logprob_start_len": None, "top_logprobs_num": top_logprobs_num,
               "token_ids_logprob": None, "lora_path": None, "custom_logit_processor": None}
    payload = {k: v for k, v in payload.items() if v is not None}
    return s.post("/generate", payload)


# http_server_engine.py HttpServerAdapter.flush_cache: GET /flush_cache until 200,
# max_attempts * 2 tries, retry_delay apart (returns {} when it never succeeds).
def verl_flush_cache(s, max_attempts=3, retry_delay=0.5):
    for _ in range(max_attempts * 2):
        status, j = s.get("/flush_cache")
        if status == 200:
            return j
        time.sleep(retry_delay)
    return {}


def replay_verl(s, micro):
    prompt, _ = stories_reference()
    # launch_server_process: GET /health_generate until 200, then GET /flush_cache until 200.
    status, _ = s.get("/health_generate")
    check(status == 200, f"verl launch: /health_generate {status}")
    check(verl_flush_cache(s).get("success") is True, "verl launch: /flush_cache never answered 200")
    sp = {"temperature": 0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 20}
    status, first = verl_generate(s, prompt, sp, top_logprobs_num=3)
    check(status == 200 and check_sglang_generate(first, "verl generate"), f"verl generate: {status} {first}"[:500])
    if status == 200:
        top = first["meta_info"].get("output_top_logprobs")
        check(isinstance(top, list) and len(top) == 20 and all(isinstance(t, list) and len(t) == 3 for t in top),
              f"verl top_logprobs_num 3: output_top_logprobs {top!r}"[:300])
        if isinstance(top, list) and len(top) == 20 and all(isinstance(t, list) and t for t in top):
            check(all(t[0][1] == tok for t, tok in zip(top, first["output_ids"])), "verl greedy: top-1 is not the chosen token")
    # The same adapter with a text prompt (`prompt` -> "text"): tokenized by the server with
    # BOS, i.e. llama2.c's prompt tokens, so llama2.c's greedy tokens come back.
    _, reference = stories_reference()
    status, j = s.post("/generate", {k: v for k, v in {"text": "Once upon a time", "sampling_params": sp, "input_ids": None,
                                                        "return_logprob": True}.items() if v is not None})
    if check(status == 200 and check_sglang_generate(j, "verl text prompt"), f"verl text prompt: {status} {j}"[:300]):
        check(j["output_ids"] == reference[:20] and j["meta_info"]["prompt_tokens"] == len(prompt),
              f"verl text prompt: {j['output_ids']} ({j['meta_info']['prompt_tokens']} prompt tokens) != llama2.c {reference[:20]}")
    # abort_request: {"rid": rid, "abort_all": abort_all}; rid defaults to "".
    mprompt, _ = llama_reference()
    base = micro.metric("refit_generation_tokens_total")
    t, box = in_thread(verl_generate, micro, mprompt, {"temperature": 0, "max_new_tokens": 400, "ignore_eos": True})
    check(micro.wait_generated(base, 5), "verl abort: the long request never started")
    status, j = micro.post("/abort_request", {"rid": "", "abort_all": True})
    check(status == 200, f"verl abort_request: {status} {j}")
    t.join(60)
    r = box[0]
    if check(isinstance(r, tuple) and r[0] == 200, f"verl abort: the aborted request gave {r!r}"[:300]):
        fr = r[1]["meta_info"]["finish_reason"]
        check(fr.get("type") == "abort" and len(r[1]["output_ids"]) < 400, f"verl abort: finish_reason {fr}")
    status, j = micro.post("/abort_request", {"rid": "no-such-request", "abort_all": False})
    check(status == 200, f"verl abort_request of an unknown rid: {status} {j}")

    # verl/workers/rollout/sglang_rollout/sglang_rollout.py ServerAdapter.release:
    # release_memory_occupation(tags=["kv_cache", "weights"]); verl/workers/fsdp_workers.py
    # rollout_mode: resume(tags=["weights"]), update_weights (the tensor buckets, then
    # flush_cache; replaced here by /update_weights_from_disk of the same checkpoint),
    # resume(tags=["kv_cache"]).
    status, j = s.post("/release_memory_occupation", {"tags": ["kv_cache", "weights"]})
    check(status == 200 and j.get("success") is True, f"verl release: {status} {j}")
    status, j = s.get("/is_sleeping")
    check(status == 200 and j.get("is_sleeping") is True, f"verl: /is_sleeping after release: {status} {j}")
    status, j = verl_generate(s, prompt, sp)
    check(status == 503, f"verl: /generate with weights and KV released answered {status}, wanted 503")
    status, j = s.post("/resume_memory_occupation", {"tags": ["weights"]})
    check(status == 200 and j.get("success") is True, f"verl resume weights: {status} {j}")
    status, j = s.post("/update_weights_from_disk", {"model_path": STORIES_HF})
    check(status == 200 and j.get("success") is True, f"verl weight refill: {status} {j}")
    check(verl_flush_cache(s).get("success") is True, "verl update_weights: flush_cache never answered 200")
    status, j = s.post("/resume_memory_occupation", {"tags": ["kv_cache"]})
    check(status == 200 and j.get("success") is True, f"verl resume kv_cache: {status} {j}")
    status, j = s.get("/is_sleeping")
    check(status == 200 and j.get("is_sleeping") is False, f"verl: /is_sleeping after resume: {status} {j}")
    status, again = verl_generate(s, prompt, sp, top_logprobs_num=3)
    if check(status == 200 and check_sglang_generate(again, "verl generate after wake-up"), f"verl after wake-up: {status}"):
        if isinstance(first, dict) and "meta_info" in first:
            check(again["output_ids"] == first["output_ids"]
                  and again["meta_info"]["output_token_logprobs"] == first["meta_info"]["output_token_logprobs"],
                  f"verl: greedy after release/resume differs: {again['output_ids']} vs {first['output_ids']}")


# --------------------------------------------------------------------------------------
# prime-rl


# PrimeIntellect-ai/prime-rl 79b288a7 (before the verifiers 0.1.8 bump):
#   src/prime_rl/orchestrator/utils.py get_sampling_args: temperature, max_tokens, top_p
#   1.0, logprobs True, extra_body {return_tokens_as_token_ids: True, top_k: -1, min_p: 0.0,
#   min_tokens, repetition_penalty} (the OpenAI client merges extra_body into the body);
#   src/prime_rl/orchestrator/patches.py patched_parse_chat_completion_tokens /
#   _logprobs: int(token["token"].split(":")[-1]) and token["logprob"] for each entry of
#   choices[0].logprobs["content"]; utils.py parse_num_completion_tokens reads
#   usage.completion_tokens, parse_is_truncated_completions finish_reason == "length".
# PrimeIntellect-ai/prime-rl 559b4477 src/prime_rl/orchestrator/envs.py Env._sampling and
#   dispatcher.py schedule_group_episode: extra_body["cache_salt"] = str(policy version).
def replay_prime_rl(s):
    status, models = s.get("/v1/models")
    model = models["data"][0]["id"] if status == 200 else None
    body = {"model": model, "messages": [{"role": "user", "content": "Tell me a story about a cat."}],
            "temperature": 1.0, "max_tokens": 16, "top_p": 1.0, "logprobs": True,
            "return_tokens_as_token_ids": True, "top_k": -1, "min_p": 0.0, "min_tokens": 0, "repetition_penalty": 1.0,
            "cache_salt": "0"}
    status, j = s.post("/v1/chat/completions", body)
    if not check(status == 200 and isinstance(j, dict) and isinstance(j.get("choices"), list) and len(j["choices"]) == 1,
                 f"prime-rl chat completion: {status} {j}"[:500]):
        return
    choice = j["choices"][0]
    lp = choice.get("logprobs")
    if not check(isinstance(lp, dict) and isinstance(lp.get("content"), list), f"prime-rl: logprobs.content missing: {lp!r}"):
        return
    content = lp["content"]
    raw = [t.get("token") for t in content]
    check(all(isinstance(x, str) and re.fullmatch(r"token_id:\d+", x) for x in raw),
          f"prime-rl: return_tokens_as_token_ids: logprobs.content[].token are {raw!r}, wanted 'token_id:N' "
          f"(patched_parse_chat_completion_tokens does int(token.split(':')[-1]))")
    try:
        tokens = [int(t["token"].split(":")[-1]) for t in content]
    except (ValueError, KeyError, AttributeError) as e:
        tokens = None
        check(False, f"prime-rl: parsing logprobs.content tokens raised {e!r}")
    logprobs = [t.get("logprob") for t in content]
    check(all(is_num(x) and x <= 0 for x in logprobs), f"prime-rl: logprobs {logprobs}")
    if tokens is not None:
        check(tokens == choice.get("token_ids"), f"prime-rl: parsed tokens {tokens} != choices[0].token_ids {choice.get('token_ids')}")
    usage = j.get("usage") or {}
    check(usage.get("completion_tokens") == len(content) == 16, f"prime-rl: usage {usage} for {len(content)} tokens")
    check(choice.get("finish_reason") == "length", f"prime-rl: finish_reason {choice.get('finish_reason')!r} at max_tokens")
    check(isinstance(choice.get("message", {}).get("content"), str), "prime-rl: message.content is not a string")


# --------------------------------------------------------------------------------------
# AReaL's vLLM backend


# areal/engine/vllm_remote.py VLLMBackend.build_generation_request (inclusionAI/AReaL
# 4aef98d8): flat payload {top_p, top_k, max_tokens, temperature (0 when greedy),
# stop_token_ids, ignore_eos, skip_special_tokens, return_tokens_as_token_ids: True,
# logprobs: 0, use_beam_search, stream: False, prompt: input_ids} to /v1/completions;
# parse_generation_response reads choices[0].finish_reason and, under logprobs,
# "tokens" -> int(t.split(":")[1]) and "token_logprobs".
def areal_vllm_generate(s, input_ids, max_new_tokens, greedy=True, stop_token_ids=(2,)):
    payload = {"top_p": 1.0, "top_k": int(1e8), "max_tokens": max_new_tokens, "temperature": 0.0 if greedy else 1.0,
               "stop_token_ids": list(stop_token_ids), "ignore_eos": False, "skip_special_tokens": True,
               "return_tokens_as_token_ids": True, "logprobs": 0, "use_beam_search": False, "stream": False,
               "prompt": list(input_ids)}
    status, j = s.post("/v1/completions", payload)
    if not check(status == 200 and isinstance(j, dict) and isinstance(j.get("choices"), list) and j["choices"],
                 f"AReaL vLLM /v1/completions: {status} {j}"[:400]):
        return None
    meta = j["choices"][0]
    lp = meta.get("logprobs")
    if not check(isinstance(lp, dict) and "tokens" in lp and "token_logprobs" in lp, f"AReaL vLLM: logprobs {lp!r}"[:300]):
        return None
    try:
        tokens = [int(t.split(":")[1]) for t in lp["tokens"]]
    except (ValueError, IndexError, AttributeError) as e:
        check(False, f"AReaL vLLM: logprobs.tokens {lp['tokens']!r} are not 'token_id:N': {e!r}"[:300])
        return None
    check(all(is_num(x) for x in lp["token_logprobs"]) and len(lp["token_logprobs"]) == len(tokens),
          f"AReaL vLLM: token_logprobs {lp['token_logprobs']!r}"[:300])
    check(meta.get("finish_reason") in ("stop", "length", "abort"), f"AReaL vLLM: finish_reason {meta.get('finish_reason')!r}")
    check(tokens == meta.get("token_ids"), f"AReaL vLLM: 'token_id:N' ids {tokens} != token_ids {meta.get('token_ids')}")
    return {"tokens": tokens, "logprobs": lp["token_logprobs"], "stop_reason": meta.get("finish_reason")}


def replay_areal_vllm_and_logprobs(s):
    prompt, reference = stories_reference()
    a = areal_vllm_generate(s, prompt, 24)
    b = areal_vllm_generate(s, prompt, 24)
    if a and b:
        check(a["tokens"] == reference[:24], f"AReaL vLLM greedy: {a['tokens']} != llama2.c {reference[:24]}")
        check(b["tokens"] == a["tokens"] and b["logprobs"] == a["logprobs"], "AReaL vLLM: a second identical greedy request differs")
        check(a["stop_reason"] == "length", f"AReaL vLLM: finish_reason {a['stop_reason']} at max_tokens")
    # stop_token_ids: the third greedy token stops the completion (finish "stop", token kept).
    c = areal_vllm_generate(s, prompt, 24, stop_token_ids=(reference[2],))
    if c:
        check(c["tokens"] == reference[:3] and c["stop_reason"] == "stop",
              f"AReaL vLLM stop_token_ids [{reference[2]}]: {c['tokens']} finish {c['stop_reason']}")
    # Logprob consistency: greedy /generate (SGLang) and /v1/completions (vLLM) for the same
    # prompt ids give the same tokens and the same logprobs, bit for bit as JSON floats.
    status, g = s.post("/generate", {"input_ids": prompt, "return_logprob": True,
                                     "sampling_params": {"temperature": 0, "max_new_tokens": 24}})
    if a and check(status == 200 and check_sglang_generate(g, "logprob consistency /generate"), f"/generate: {status}"):
        otl = g["meta_info"]["output_token_logprobs"]
        check([x[1] for x in otl] == a["tokens"], f"/generate ids {[x[1] for x in otl]} != /v1/completions {a['tokens']}")
        check([x[0] for x in otl] == a["logprobs"],
              f"greedy logprobs differ: /generate {[x[0] for x in otl]} vs /v1/completions {a['logprobs']}")


# --------------------------------------------------------------------------------------
# AReaL's SGLang backend: abort-resume across a weight update


# areal/engine/sglang_remote.py SGLangBackend.build_generation_request (AReaL 4aef98d8):
# sampling params {top_p, top_k, max_new_tokens, temperature (0.0 when greedy),
# stop_token_ids, ignore_eos, skip_special_tokens, frequency_penalty}; payload {input_ids,
# image_data, sampling_params, return_logprob: True, stream: False}.
# parse_generation_response reads meta_info.finish_reason["type"], .get("message"), and
# output_token_logprobs (x[1] ids, x[0] logprobs).
def areal_sglang_request(input_ids, max_new_tokens):
    sample_params = {"top_p": 1.0, "top_k": int(1e8), "max_new_tokens": max_new_tokens, "temperature": 0.0,
                     "stop_token_ids": [2], "ignore_eos": True, "skip_special_tokens": True, "frequency_penalty": 0.0}
    return {"input_ids": list(input_ids), "image_data": None, "sampling_params": sample_params, "return_logprob": True,
            "stream": False}


# areal/infra/remote_inf_engine.py RemoteInfEngine.agenerate: while stop_reason not in
# (stop, tool_calls, length) and fewer than max_new_tokens tokens: send, accumulate
# output_tokens / logprobs, then input_ids += output tokens and max_new_tokens -= their
# count; a final "abort" becomes "length".
def areal_agenerate(s, input_ids, max_new_tokens, log):
    input_ids = list(input_ids)
    acc_tokens, acc_logprobs = [], []
    stop_reason = None
    remaining = max_new_tokens
    while stop_reason not in ("stop", "tool_calls", "length") and len(acc_tokens) < max_new_tokens:
        status, result = s.post("/generate", areal_sglang_request(input_ids, remaining))
        if status != 200 or not isinstance(result, dict):
            raise RuntimeError(f"/generate answered {status}: {result}")
        meta_info = result["meta_info"]
        stop_reason = meta_info["finish_reason"]["type"]
        stop_message = meta_info["finish_reason"].get("message", "")
        if stop_reason == "abort" and stop_message.startswith("Abort before prefill"):
            out, lps = [], []
        else:
            out = [x[1] for x in meta_info["output_token_logprobs"]]
            lps = [x[0] for x in meta_info["output_token_logprobs"]]
        log.append({"status": status, "stop_reason": stop_reason, "n": len(out), "result": result})
        acc_tokens += out
        acc_logprobs += lps
        input_ids += out
        remaining -= len(out)
        assert remaining >= 0, remaining
        if len(log) > 50:
            raise RuntimeError("more than 50 rounds of abort-resume")
    if stop_reason == "abort":
        stop_reason = "length"
    return acc_tokens, acc_logprobs, stop_reason


# The trainer: areal/engine/fsdp_engine.py FSDPEngine._update_weights_from_disk ->
# RemoteInfEngine.pause_generation (SGLangBackend.get_pause_request: POST
# /pause_generation {}; then sleep pause_grace_period, 0.0 by default),
# update_weights_from_disk (build_disk_weight_update_requests: POST
# /update_weights_from_disk {"model_path", "abort_all_requests": True}),
# continue_generation (POST /continue_generation {}).
def areal_trainer(s, model_path, base, log):
    if not s.wait_generated(base, 20):
        raise RuntimeError("the rollout never generated 20 tokens")
    for endpoint, payload in (("/pause_generation", {}), ("/update_weights_from_disk",
                                                         {"model_path": model_path, "abort_all_requests": True}),
                              ("/continue_generation", {})):
        status, j = s.post(endpoint, payload)
        log.append((endpoint, status, j))
        if status != 200:
            raise RuntimeError(f"{endpoint} answered {status}: {j}")
    return True


def replay_areal_sglang(micro):
    prompt, reference = llama_reference()
    # SGLangBackend.get_health_check_request: GET /health.
    status, _ = micro.get("/health")
    check(status == 200, f"AReaL /health: {status}")
    N = 160
    status, v = micro.get("/get_weight_version")
    v_old = v.get("weight_version") if isinstance(v, dict) else None
    base = micro.metric("refit_generation_tokens_total")
    log, tlog = [], []
    gen, gbox = in_thread(areal_agenerate, micro, prompt, N, log)
    trainer, tbox = in_thread(areal_trainer, micro, LLAMA_Q8, base, tlog)
    trainer.join(120)
    gen.join(120)
    if not check(tbox[0] is True, f"AReaL trainer: {tbox[0]!r} {tlog}"[:600]):
        return
    if not check(isinstance(gbox[0], tuple), f"AReaL agenerate: {gbox[0]!r}"[:600]):
        return
    tokens, logprobs, stop_reason = gbox[0]
    rounds = [(r["stop_reason"], r["n"]) for r in log]
    print(f"AReaL abort-resume rounds (finish, tokens): {rounds}", flush=True)
    for i, r in enumerate(log):
        check_sglang_generate(r["result"], f"AReaL round {i}")
    check(len(tokens) == N and stop_reason == "length", f"AReaL: accumulated {len(tokens)} of {N} tokens, stop {stop_reason}")
    check(len(log) >= 2 and log[0]["stop_reason"] == "abort",
          f"AReaL: the pause did not interrupt the rollout (rounds {rounds}); the test's timing is off")
    check(log[-1]["stop_reason"] == "length", f"AReaL: last round finished {log[-1]['stop_reason']}")
    upd = [t for t in tlog if t[0] == "/update_weights_from_disk"]
    v_new = upd[0][2].get("weight_version") if upd else None
    check(v_new is not None and v_new != v_old, f"AReaL: the update's weight_version {v_new} (before {v_old})")
    versions = []
    for r in log:
        versions += r["result"]["meta_info"].get("weight_versions", [])
    k = next((i for i, x in enumerate(versions) if x != v_old), len(versions))
    check(len(versions) == N and 0 < k < N and versions == [v_old] * k + [v_new] * (N - k),
          f"AReaL: per-token weight_versions do not show one switch {v_old} -> {v_new}: "
          f"{[(x, sum(1 for _ in g)) for x, g in __import__('itertools').groupby(versions)]}")
    # Before the switch: the F32 weights' greedy tokens (llama.cpp's, as far as it went).
    m = min(k, len(reference))
    check(tokens[:m] == reference[:m], f"AReaL: tokens before the switch {tokens[:m]} != llama.cpp F32 {reference[:m]}")
    # After: what a fresh server on the Q8_0 weights generates from the accumulated prefix.
    fresh = Server(LLAMA_Q8)
    try:
        status, j = fresh.post("/generate", areal_sglang_request(prompt + tokens[:k], N - k))
        if check(status == 200 and check_sglang_generate(j, "fresh Q8_0 server"), f"fresh Q8_0 /generate: {status}"):
            check(j["output_ids"] == tokens[k:],
                  f"AReaL: {N - k} tokens after the switch differ from a fresh Q8_0 server's from the same prefix "
                  f"(first difference at {next((i for i, (x, y) in enumerate(zip(j['output_ids'], tokens[k:])) if x != y), None)})")
            fresh_lp = [x[0] for x in j["meta_info"]["output_token_logprobs"]]
            check(fresh_lp == logprobs[k:], "AReaL: logprobs after the switch differ from the fresh Q8_0 server's")
    finally:
        fresh.stop()
    # And the F32 weights, from the same prompt: the same tokens up to the switch, other ones after.
    f32 = Server(LLAMA)
    try:
        status, j = f32.post("/generate", areal_sglang_request(prompt, N))
        if check(status == 200 and check_sglang_generate(j, "fresh F32 server"), f"fresh F32 /generate: {status}"):
            check(j["output_ids"][:k] == tokens[:k], "AReaL: tokens before the switch differ from a fresh F32 server's")
            check(j["output_ids"][k:] != tokens[k:], "AReaL: the Q8_0 weights changed none of the tokens after the switch")
    finally:
        f32.stop()


def section(name, fn, *args):
    t0 = time.time()
    try:
        fn(*args)
    except Exception:
        check(False, f"{name}: raised\n{traceback.format_exc()}")
    print(f"{name}: done in {time.time() - t0:.1f} s", flush=True)


stories = Server(STORIES_HF, "--tokenizer", STORIES_TOK)
micro = Server(LLAMA)
try:
    section("AReaL vLLM backend + logprob consistency", replay_areal_vllm_and_logprobs, stories)
    section("prime-rl", replay_prime_rl, stories)
    section("slime", replay_slime, stories, micro)
    section("verl", replay_verl, stories, micro)
    section("AReaL SGLang abort-resume", replay_areal_sglang, micro)
finally:
    stories.stop()
    micro.stop()

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("RL client replays: all checks passed")
