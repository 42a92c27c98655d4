#!/usr/bin/python3
"""Stop ids and generation_config.json sampling defaults through every front end (argv[1]: the
refit binary): `refit generate`, `refit inspect`, and `refit serve`'s /v1/completions,
/v1/chat/completions and SGLang's /generate.

What it holds refit to (each check can fail; the comment says what it catches):
- an eos_token_id list in config.json (a folder without tokenizer files) stops on each listed
  id, and generation_config.json's ids are merged in (vLLM adds them to stop_token_ids);
- generation_config.json's temperature / max_new_tokens apply to a request that leaves them
  unset, and an explicit value wins, explicit 0 and 1.0 included (vLLM's --generation-config
  auto); `--generation-config vllm` ignores them; `--generation-config FOLDER` reads FOLDER's;
- a malformed generation_config.json ("temperature": "hot") refuses to load, naming the file
  and the field.
The model is stories260K's Hugging Face folder (260K parameters, no tokenizer files).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES = os.path.join(ROOT, "..", "shared", "oracle", "stories260K")
HF = os.path.join(STORIES, "hf")
GGUF = os.path.join(STORIES, "stories260K.gguf")  # its tokenizer, for text and chat
PROMPT = [1, 403, 407, 261, 378]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(args, ok=True):
    p = subprocess.run([REFIT] + args, capture_output=True, text=True, timeout=300)
    if ok and p.returncode != 0:
        failures.append(f"refit {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def folder(tmp, name, config_eos=None, gen=None):
    """A copy of stories260K's folder (weights linked) with these eos ids / generation_config."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    os.symlink(os.path.join(HF, "model.safetensors"), os.path.join(d, "model.safetensors"))
    with open(os.path.join(HF, "config.json")) as f:
        cfg = json.load(f)
    if config_eos is not None:
        cfg["eos_token_id"] = config_eos
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    if gen is not None:
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(gen, f)
    return d


def cli_tokens(model, *extra):
    p = run(["generate", "-m", model, "--prompt-ids", " ".join(map(str, PROMPT)), "--json", "-t", "1", *extra])
    return json.loads(p.stdout) if p.returncode == 0 else {"tokens": [], "finish_reason": None}


tmp = tempfile.mkdtemp(prefix="refit_genconfig_")
try:
    # ---- stop ids: a folder without tokenizer files ----
    free = cli_tokens(HF, "-n", "24", "--ignore-eos")["tokens"]
    check(len(free) == 24, f"free run {free}")
    absent = next(i for i in range(3, 512) if i not in free)
    for k, where in ((3, "config"), (8, "generation_config")):
        target = free[k]
        stop_at = free.index(target)
        want = free[: stop_at + 1]
        if where == "config":  # the second entry of config.json's list
            m = folder(tmp, f"eos{k}", config_eos=[absent, target])
        else:  # only generation_config.json names it
            m = folder(tmp, f"eos{k}", config_eos=[absent], gen={"eos_token_id": target})
        j = cli_tokens(m, "-n", "24")
        # Catches: a list read as nothing (the old default 2 stopped instead) or ids not merged.
        check(j["tokens"] == want and j["finish_reason"] == "stop",
              f"CLI, {where} eos {target}: {j['tokens']} {j['finish_reason']}, want {want}")
        s = RefitServer(REFIT, m)
        try:
            st, body = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0,
                                                  "return_tokens_as_token_ids": True})
            check(st == 200 and body["choices"][0]["finish_reason"] == "stop"
                  and body["usage"]["completion_tokens"] == len(want),
                  f"/v1/completions, {where} eos {target}: {st} {body}")
            st, body = s.post("/generate", {"input_ids": PROMPT,
                                            "sampling_params": {"max_new_tokens": 24, "temperature": 0}})
            check(st == 200 and body["output_ids"] == want,
                  f"/generate, {where} eos {target}: {st} {body.get('output_ids') if st == 200 else body}")
            st, models = s.get("/v1/models")
            check(target in models["data"][0].get("stop_token_ids", []), f"/v1/models stop ids {models}")
        finally:
            s.stop()
        insp = run(["inspect", m, "--json"])
        gen_info = json.loads(insp.stdout)["generation"] if insp.returncode == 0 else {}
        check(gen_info.get("stop_token_ids") == sorted({absent, target}), f"inspect stop ids {gen_info}")

    # ---- sampling defaults ----
    a = folder(tmp, "auto", gen={"temperature": 0.0, "max_new_tokens": 5})  # greedy, 5 tokens
    b = folder(tmp, "hot_b", gen={"temperature": 1.5})  # read through --generation-config FOLDER
    greedy = cli_tokens(HF, "-n", "16", "--ignore-eos", "--temp", "0")["tokens"]
    tok = ["--tokenizer", GGUF]
    s_vllm = RefitServer(REFIT, a, "--generation-config", "vllm", *tok)
    s_auto = RefitServer(REFIT, a, *tok)
    s_b = RefitServer(REFIT, a, "--generation-config", b, *tok)
    try:
        def comp(s, **fields):
            body = {"prompt": PROMPT, "max_tokens": 16, "ignore_eos": True, "return_tokens_as_token_ids": True}
            body.update(fields)
            st, r = s.post("/v1/completions", body)
            check(st == 200, f"/v1/completions {fields}: {st} {r}")
            return [int(t.split(":")[1]) for t in r["choices"][0]["logprobs"]["tokens"]] if st == 200 else None

        def gen(s, **fields):
            sp = {"max_new_tokens": 16, "ignore_eos": True}
            sp.update(fields)
            st, r = s.post("/generate", {"input_ids": PROMPT, "sampling_params": sp})
            check(st == 200, f"/generate {fields}: {st} {r}")
            return r["output_ids"] if st == 200 else None

        check(comp(s_vllm, temperature=0, logprobs=0) == greedy, "greedy completions differ from the CLI's")
        # A seed whose sample at the engine default (temperature 1.0) is not the greedy text: the
        # control showing the checks below can fail.
        seed = next((x for x in range(1, 20) if comp(s_vllm, seed=x, logprobs=0) != greedy), None)
        check(seed is not None, "no seed samples away from greedy at temperature 1")
        sampled = comp(s_vllm, seed=seed, logprobs=0)
        sg_sampled = gen(s_vllm, sampling_seed=seed)
        check(sg_sampled != greedy, "/generate at temperature 1 is greedy")
        # Catches: the file's temperature 0 not applied to an unset field.
        check(comp(s_auto, seed=seed, logprobs=0) == greedy, "auto: unset temperature did not take the file's 0")
        check(gen(s_auto, sampling_seed=seed) == greedy, "auto /generate: unset temperature did not take 0")
        # Catches: an explicit 1.0 (the engine default) mistaken for unset.
        check(comp(s_auto, seed=seed, temperature=1.0, logprobs=0) == sampled, "auto: explicit temperature 1.0 lost")
        check(gen(s_auto, sampling_seed=seed, temperature=1.0) == sg_sampled, "auto /generate: explicit 1.0 lost")
        # FOLDER's temperature 1.5 applies; an explicit 0 wins over it.
        check(comp(s_b, seed=seed, logprobs=0) != greedy, "--generation-config FOLDER: temperature 1.5 not applied")
        check(comp(s_b, seed=seed, temperature=0, logprobs=0) == greedy, "explicit temperature 0 lost")
        check(gen(s_b, sampling_seed=seed, temperature=0) == greedy, "/generate: explicit temperature 0 lost")

        # max_new_tokens: chat without max_tokens gets 5; an explicit one wins; completions keep
        # vLLM's 16; --generation-config vllm: the rest of the context.
        def chat(s, **fields):
            body = {"messages": [{"role": "user", "content": "Once upon a time"}], "ignore_eos": True}
            body.update(fields)
            st, r = s.post("/v1/chat/completions", body)
            check(st == 200, f"chat {fields}: {st} {r}")
            return r["usage"]["completion_tokens"] if st == 200 else None

        check(chat(s_auto) == 5, "auto chat: max_new_tokens 5 not applied")
        check(chat(s_auto, max_tokens=7) == 7, "auto chat: explicit max_tokens lost")
        check(chat(s_auto, max_completion_tokens=3) == 3, "auto chat: explicit max_completion_tokens lost")
        check((chat(s_vllm) or 0) > 5, "vllm chat: max_new_tokens applied")
        st, r = s_auto.post("/v1/completions", {"prompt": PROMPT, "ignore_eos": True})
        check(st == 200 and r["usage"]["completion_tokens"] == 16, f"completions default max_tokens: {r}")
        st, m = s_auto.get("/v1/models")
        check(m["data"][0].get("generation_defaults") == {"temperature": 0.0, "max_tokens": 5}, f"auto /v1/models {m}")
        st, m = s_vllm.get("/v1/models")
        check(m["data"][0].get("generation_defaults") == {}, f"vllm /v1/models {m}")
    finally:
        for s in (s_vllm, s_auto, s_b):
            s.stop()

    # CLI: unset -n takes max_new_tokens; unset --temp takes the file's (FOLDER's 1.5).
    check(len(cli_tokens(a, "--ignore-eos")["tokens"]) == 5, "CLI: max_new_tokens not applied to -n")
    check(len(cli_tokens(a, "--ignore-eos", "-n", "7")["tokens"]) == 7, "CLI: explicit -n lost")
    check(len(cli_tokens(a, "--ignore-eos", "--generation-config", "vllm")["tokens"]) == 64,
          "CLI --generation-config vllm: max_new_tokens applied")
    cli_sampled = [cli_tokens(a, "--ignore-eos", "-n", "16", "--generation-config", b, "--seed", str(x))["tokens"]
                   for x in range(1, 6)]
    check(any(t != greedy for t in cli_sampled), "CLI: FOLDER's temperature 1.5 not applied")
    check(cli_tokens(a, "--ignore-eos", "-n", "16", "--generation-config", b, "--temp", "0")["tokens"] == greedy,
          "CLI: explicit --temp 0 lost")
    insp = run(["inspect", a])
    check("temperature 0, max_tokens 5 (from " in insp.stdout and "generation_config.json" in insp.stdout,
          f"inspect defaults line: {insp.stdout[-600:]}")

    # ---- malformed: refused at load, naming the file and the field ----
    bad = folder(tmp, "bad", gen={"temperature": "hot"})
    for cmd in (["generate", "-m", bad, "--prompt-ids", "1", "-n", "2"],
                ["serve", "-m", bad, "--port", "0"]):
        p = run(cmd, ok=False)
        check(p.returncode != 0 and "generation_config.json: 'temperature' must be a number" in p.stderr,
              f"refit {cmd[0]} on a string temperature: rc {p.returncode}, {p.stderr[-400:]}")
    check(len(cli_tokens(bad, "-n", "3", "--ignore-eos", "--generation-config", "vllm")["tokens"]) == 3,
          "--generation-config vllm must load a folder whose sampling fields are malformed")
except Exception as e:  # an answer without the fields checked: a failure, listed with the others
    failures.append(f"stopped by {type(e).__name__}: {e}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("generation_config: all checks passed")
