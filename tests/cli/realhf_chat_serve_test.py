#!/usr/bin/python3
"""Real chat templates served end to end (CTest runs this file; argv[1] is refit).

For every model of ../shared/realhf: its real tokenizer files and chat template beside a tiny
random-weight checkpoint built from its real config (realhf/tools/tiny_ckpt.py, the checkpoint
behind the references' `serve_next`), served by `refit serve`. Each chat case is sent as a client
sends it (messages, tools, chat_template_kwargs) with max_tokens 1, temperature 0, logprobs and
return_token_ids. The answer must show
  * prompt_token_ids equal to Hugging Face's (the rendered template, tokenized as transformers
    does: what vLLM and SGLang feed the model), and
  * the greedy token and its logprob equal to the float64 reference forward of that prompt
    (a prompt off by one token, even of the same length, moves the logprob by about 1e-3).
A case the template refuses must be answered with a 4xx carrying the template's message.
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refit_server import RefitServer  # noqa: E402

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REALHF = os.path.join(ROOT, "..", "shared", "realhf")
TINY_CKPT = os.path.join(REALHF, "tools", "tiny_ckpt.py")
LOGPROB_TOLERANCE = 1e-4
failures = []


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def build_checkpoint(name, m, ref, out):
    """The model's tokenizer files + the refs' serve_config, weights by tiny_ckpt (seed 0)."""
    os.makedirs(out)
    src = os.path.join(REALHF, m["dir"])
    for f in os.listdir(src):
        if f not in ("config.json", "vocab.json", "merges.txt", "generation_config.json"):
            shutil.copy(os.path.join(src, f), out)
    if m.get("tokenizer_json"):
        p = os.path.join(REALHF, m["tokenizer_json"])
        data = gzip.open(p).read() if p.endswith(".gz") else open(p, "rb").read()
        open(os.path.join(out, "tokenizer.json"), "wb").write(data)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(ref["serve_config"], f)
    r = subprocess.run(["/usr/bin/python3", TINY_CKPT, "weights", out, "--seed", "0"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        failures.append(f"{name}: tiny_ckpt weights failed: {r.stderr[-400:]}")
        return False
    if ref.get("serve_checkpoint_sha256") and ref["serve_checkpoint_sha256"] not in r.stdout:
        failures.append(f"{name}: the checkpoint is not the references' ({r.stdout.strip()[:80]})")
        return False
    return True


def check_model(name, m, cases, tmp):
    ref = load(os.path.join(REALHF, "refs", name + ".json"))
    ckpt = os.path.join(tmp, name)
    if not build_checkpoint(name, m, ref, ckpt):
        return
    server = RefitServer(REFIT, ckpt)
    try:
        for row in ref["chat"]:
            case = cases[row["case"]]
            body = {"messages": case["messages"], "max_tokens": 1, "temperature": 0, "logprobs": True,
                    "return_token_ids": True}
            for k in ("tools", "chat_template_kwargs"):
                if k in case:
                    body[k] = case[k]
            status, answer = server.post("/v1/chat/completions", body)
            where = f"{name}/{row['case']}"
            if "error" in row:
                if not (400 <= status < 500):
                    failures.append(f"{where}: the template refuses it, the server answered {status}")
                continue
            if status != 200:
                failures.append(f"{where}: status {status}: {answer}")
                continue
            if answer.get("prompt_token_ids") != row["prompt_ids"]:
                got = answer.get("prompt_token_ids") or []
                first = next((i for i, (a, b) in enumerate(zip(got, row["prompt_ids"])) if a != b),
                             min(len(got), len(row["prompt_ids"])))
                failures.append(f"{where}: prompt ids differ from Hugging Face's at {first} "
                                f"({len(got)} vs {len(row['prompt_ids'])} tokens)")
                continue
            if "serve_next" not in row:
                continue
            choice = answer["choices"][0]
            token = choice["token_ids"][0]
            logprob = choice["logprobs"]["content"][0]["logprob"]
            want = row["serve_next"]
            err = abs(logprob - want["logprob"])
            print(f"{where}: {len(row['prompt_ids'])} prompt tokens, next {token}, "
                  f"|logprob - ref| = {err:.1e}")
            if token != want["token"] or err > LOGPROB_TOLERANCE:
                failures.append(f"{where}: next token {token} logprob {logprob}, reference "
                                f"{want['token']} {want['logprob']}")
        if name == "mistral-7b-instruct-v0.3":
            check_errors_and_streams(server, cases["single_user"], ref["chat"][0]["prompt_ids"])
    finally:
        server.stop()


def check_errors_and_streams(server, case, prompt_ids):
    """Mistral's template refuses non-alternating roles: a 400 with its message. Streams and
    completions return the prompt ids too (vLLM's return_token_ids)."""
    body = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "max_tokens": 1}
    status, answer = server.post("/v1/chat/completions", body)
    message = answer.get("error", {}).get("message", "") if isinstance(answer, dict) else ""
    if status != 400 or "alternate" not in message:
        failures.append(f"a template that raises: status {status}, {answer}")
    events = server.stream("/v1/chat/completions", {"messages": case["messages"], "max_tokens": 2, "stream": True,
                                                    "return_token_ids": True})
    first = json.loads(events[0])
    if first.get("prompt_token_ids") != prompt_ids:
        failures.append(f"a streamed chat's first chunk lacks the prompt ids: {events[0][:200]}")
    status, tokenized = server.post("/tokenize", {"prompt": "Hello world"})
    status, answer = server.post("/v1/completions", {"prompt": "Hello world", "max_tokens": 1,
                                                     "return_token_ids": True})
    if answer["choices"][0].get("prompt_token_ids") != tokenized.get("tokens"):
        failures.append(f"completions prompt_token_ids {answer['choices'][0].get('prompt_token_ids')} "
                        f"vs /tokenize {tokenized.get('tokens')}")
    events = server.stream("/v1/completions", {"prompt": "Hello world", "max_tokens": 2, "stream": True,
                                               "return_token_ids": True})
    if json.loads(events[0])["choices"][0].get("prompt_token_ids") != tokenized.get("tokens"):
        failures.append(f"a streamed completion's first chunk lacks the prompt ids: {events[0][:200]}")


manifest = load(os.path.join(REALHF, "models.json"))
cases = {c["id"]: c for c in load(os.path.join(REALHF, "cases.json"))["chat"]}
with tempfile.TemporaryDirectory() as tmp:
    for name, m in sorted(manifest["models"].items()):
        if m.get("chat"):
            check_model(name, m, cases, tmp)

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
