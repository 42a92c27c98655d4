#!/usr/bin/python3
"""Tensor-parallel serving end to end (CTest runs this file; argv[1] is the refit binary).

Starts `refit serve` once alone (TP=1) and once as `mpirun -np 2 refit serve --tp 2`, sends
the same greedy completions (the llama.cpp oracle prompts, as token ids; several at once
so the TP server batches them) and checks that TP=2 answers with TP=1's tokens and with
llama.cpp's reference ids; refits both from disk (to the Q8_0 file's weights, then back)
and checks again; a wrong-shaped refit is refused on every rank; SIGTERM to rank 0 stops
all ranks (mpirun exits 0).
"""
import base64
import math
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORACLE = os.path.join(ROOT, "..", "shared", "oracle", "llamacpp")
LLAMA = os.path.join(ORACLE, "llama-f32", "micro-llama-f32-s1.gguf")
LLAMA_Q8 = os.path.join(ORACLE, "llama-q8_0", "micro-llama-q8_0-s1.gguf")
QWEN2 = os.path.join(ORACLE, "qwen2-f32", "micro-qwen2-f32-s1.gguf")
PROMPTS = ["once_upon_a_time", "the_quick_brown_fox", "hello_world_123"]
N = 24
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def reference(prompt):
    kv = {}
    with open(os.path.join(ORACLE, "llama-f32", prompt + ".tokens.txt")) as f:
        for line in f:
            k, _, v = line.partition(":")
            kv[k] = v.strip()
    return [int(x) for x in kv["prompt_ids"].split()], [int(x) for x in kv["generated_ids"].split()]


class Server:
    def __init__(self, tp):
        cmd = [REFIT, "serve", "-m", LLAMA, "--port", "0", "-t", "1"]
        if tp > 1:
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(tp)] + cmd + ["--tp", str(tp)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://[^:]+:(\d+) .*tp (\d+);.*pid (\d+)\)", line)
        if not m:
            self.proc.kill()
            raise SystemExit(f"server (tp {tp}) did not start: {line!r} {''.join(self.stderr)}")
        self.port, self.tp, self.lead_pid = int(m.group(1)), int(m.group(2)), int(m.group(3))
        check(self.tp == tp, f"server reports tp {self.tp}, wanted {tp}")

    def post(self, path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def greedy_all(self):
        """Every oracle prompt at once (one batch), greedy; returns {prompt: (token ids, versions)}."""
        out = {}

        def one(name):
            ids, _ = reference(name)
            status, j = self.post("/v1/completions", {"prompt": ids, "max_tokens": N, "temperature": 0, "logprobs": 1})
            if status != 200:
                out[name] = (None, j)
                return
            out[name] = (j["choices"][0]["token_ids"], j["weight_version"])

        threads = [threading.Thread(target=one, args=(p,)) for p in PROMPTS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def stop(self):
        """SIGTERM to rank 0 only: it must stop every rank, and mpirun must exit 0."""
        os.kill(self.lead_pid, signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "timeout"
        check(rc == 0, f"tp {self.tp} server exited with {rc}: {''.join(self.stderr)[-2000:]}")


if not shutil.which("mpirun"):
    print("mpirun not found: skipping tensor-parallel serving test")
    sys.exit(0)

# Without mpirun, --tp 2 is refused with the command to use.
p = subprocess.run([REFIT, "serve", "-m", LLAMA, "--tp", "2", "--port", "0"], capture_output=True, text=True, timeout=60)
check(p.returncode != 0 and "mpirun -np 2" in p.stderr, f"--tp 2 without mpirun: {p.returncode} {p.stderr}")

tp1 = Server(1)
tp2 = Server(2)
try:
    for step, (path, version) in enumerate([(None, "1"), (LLAMA_Q8, "2"), (LLAMA, "3")]):
        if path:
            for s in (tp1, tp2):
                status, j = s.post("/update_weights_from_disk", {"model_path": path})
                check(status == 200 and j["success"] and j["weight_version"] == version,
                      f"tp {s.tp} refit from {path}: {status} {j}")
        a, b = tp1.greedy_all(), tp2.greedy_all()
        for name in PROMPTS:
            check(a[name][0] is not None and b[name][0] is not None, f"{name}: a request failed: {a[name]} {b[name]}")
            if a[name][0] is None or b[name][0] is None:
                continue
            check(b[name][0] == a[name][0], f"step {step} {name}: tp2 tokens {b[name][0]} != tp1 {a[name][0]}")
            check(b[name][1] == version, f"step {step} {name}: tp2 weight version {b[name][1]}, wanted {version}")
            want = reference(name)[1][:N]
            if path != LLAMA_Q8:
                check(b[name][0] == want, f"step {step} {name}: tp2 tokens {b[name][0]} != llama.cpp {want}")
        if path == LLAMA_Q8:  # dequantized Q8_0 weights: a slightly different model
            check(any(b[n][0] != reference(n)[1][:N] for n in PROMPTS), "tokens unchanged by the refit to the Q8_0 weights")
    # A refit to a model of another shape is refused on every rank; serving goes on unchanged.
    status, j = tp2.post("/update_weights_from_disk", {"model_path": QWEN2})
    check(status == 400 and not j["success"] and "does not match" in j["message"], f"wrong-shape refit: {status} {j}")
    b = tp2.greedy_all()
    check(all(b[n][0] == reference(n)[1][:N] and b[n][1] == "3" for n in PROMPTS), f"after a refused refit: {b}")
    # A tensor update (base64 over HTTP) is broadcast to every rank, each loading its shard
    # (down_proj is row-parallel: split by columns). A wrong-shaped one is refused everywhere.
    down = "model.layers.1.mlp.down_proj.weight"
    status, w = tp1.post("/get_weights_by_name", {"name": down, "truncate_size": 1 << 20})
    check(status == 200 and w["shape"] == [128, 352], f"get_weights_by_name: {status} {w.get('message')}")
    data = base64.b64encode(struct.pack(f"<{len(w['values'])}f", *[v * 1.5 for v in w["values"]])).decode()
    bad = {"named_tensors": [{"name": down, "dtype": "f32", "shape": [352, 128], "data": data}]}
    status, j = tp2.post("/update_weights_from_tensor", bad)
    check(status == 400 and not j["success"] and j["weight_version"] == "3", f"wrong-shaped tensor: {status} {j}")
    good = {"named_tensors": [{"name": down, "dtype": "f32", "shape": [128, 352], "data": data}]}
    for s in (tp1, tp2):
        status, j = s.post("/update_weights_from_tensor", good)
        check(status == 200 and j["success"] and j["weight_version"] == "4", f"tp {s.tp} tensor update: {status} {j}")
    a, b = tp1.greedy_all(), tp2.greedy_all()
    check(all(b[n][0] == a[n][0] and b[n][1] == "4" for n in PROMPTS), f"after a tensor update: tp2 {b} tp1 {a}")
    # Reading weights back under tp 2 gathers every rank's slice: the whole tensor, equal to
    # tp 1's, for row-parallel (down_proj: columns), column-parallel inside fused q/k/v and
    # gate/up (rows), and replicated tensors; truncated reads take the same leading values.
    for name in [down, "model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.v_proj.weight",
                 "model.layers.0.mlp.up_proj.weight", "model.norm.weight"]:
        for size in (1 << 20, 7, 300, 0, (1 << 63) - 1):
            s1, w1 = tp1.post("/get_weights_by_name", {"name": name, "truncate_size": size})
            s2, w2 = tp2.post("/get_weights_by_name", {"name": name, "truncate_size": size})
            check(s1 == 200 and s2 == 200 and w2["shape"] == w1["shape"] and w2["values"] == w1["values"]
                  and len(w1["values"]) == min(size, math.prod(w1["shape"])),
                  f"get_weights_by_name {name} [{size}] under tp 2: {s2} {w2.get('shape')} vs {w1.get('shape')}")
    status, j = tp2.post("/get_weights_by_name", {"name": "model.layers.0.no_such.weight"})
    check(status == 404 and not j["success"], f"unknown name under tp 2: {status} {j}")
    status, j = tp2.post("/get_weights_by_name", {"name": down, "truncate_size": -1})
    check(status == 400 and "truncate_size" in j["message"], f"negative truncate_size under tp 2: {status} {j}")
    check(any(b[n][0] != reference(n)[1][:N] for n in PROMPTS), "the tensor update changed no tokens")
    for s in (tp1, tp2):
        status, j = s.post("/update_weights_from_disk", {"model_path": LLAMA})
        check(status == 200 and j["weight_version"] == "5", f"tp {s.tp} refit back: {status} {j}")
    b = tp2.greedy_all()
    check(all(b[n][0] == reference(n)[1][:N] for n in PROMPTS), f"after the refit back: {b}")
    # Repeated prompt: a prefix-cache hit on rank 0's block tables is valid on every rank.
    ids = reference("once_upon_a_time")[0] + reference("once_upon_a_time")[1][:20]
    _, first = tp2.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0})
    _, again = tp2.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0})
    _, alone = tp1.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0})
    check(first["choices"][0]["token_ids"] == again["choices"][0]["token_ids"] == alone["choices"][0]["token_ids"],
          f"prefix-cache hit under tp 2: {first} {again} {alone}")
    with urllib.request.urlopen(f"http://127.0.0.1:{tp2.port}/metrics", timeout=30) as r:
        metrics = r.read().decode()
    hits = re.search(r"^refit_prefix_cache_hits_total (\d+)", metrics, re.M)
    check(hits and int(hits.group(1)) > 0, "no prefix-cache hit under tp 2")
    check(re.search(r"^refit_tensor_parallel_size 2$", metrics, re.M), "metrics do not report tp 2")
finally:
    t0 = time.time()
    tp2.stop()
    tp1.stop()
    print(f"servers stopped in {time.time() - t0:.1f} s")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("tensor-parallel serving: all checks passed")
