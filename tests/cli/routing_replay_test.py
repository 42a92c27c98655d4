#!/usr/bin/python3
"""Routing replay on SGLang's /generate against a real `refit serve` (argv[1]: the binary).

What it holds refit to, on the micro Qwen3-MoE and gpt-oss oracle models:
- return_routed_experts answers meta_info.routed_experts, base64 of int32
  [prompt + completion - 1, moe layers, k] (AReaL's and slime's decoding), valid distinct ids;
  routed_experts_start_len drops the leading rows;
- routed_experts given back (refit's extension) forces that routing: forcing a rollout's own
  routing while rescoring it changes no logprob, bit for bit; forcing another routing changes
  them and is what the request reports as routed;
- bad routing (wrong length, an expert that does not exist, a dense model) is a 400 naming
  the field, and the server keeps serving;
- under `mpirun -np 2 ... --tp 2`, experts split along their width or by expert (--ep), the
  same tokens and routing as one process, and forced routing reaches every rank (a rescoring
  forced to the rollout's routing is bitwise the unforced one).
"""
import base64
import os
import struct
import sys

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACK = os.path.join(ROOT, "..", "shared", "oracle", "llamacpp")
STORIES = os.path.join(ROOT, "..", "shared", "oracle", "stories260K", "stories260K.gguf")
MODELS = {  # file, moe layers, experts, k
    "qwen3moe": (os.path.join(PACK, "qwen3moe-f32", "micro-qwen3moe-f32-s1.gguf"), 4, 8, 2),
    "gpt-oss": (os.path.join(PACK, "gpt-oss-f32", "micro-gpt-oss-f32-s1.gguf"), 4, 8, 4),
}
PROMPT = [11, 402, 77, 1290, 5, 813, 64, 2201, 9]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def ids_of(b64):
    raw = base64.b64decode(b64)
    return list(struct.unpack(f"<{len(raw) // 4}i", raw))


def b64_of(ids):
    return base64.b64encode(struct.pack(f"<{len(ids)}i", *ids)).decode()


def rescore(s, tokens, routed=None):
    body = {"input_ids": tokens, "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True, "logprob_start_len": 0, "return_routed_experts": True}
    if routed is not None:
        body["routed_experts"] = routed
    status, j = s.post("/generate", body)
    check(status == 200, f"rescoring -> {status} {j}")
    if status != 200:
        return [], []
    return [x[0] for x in j["meta_info"]["input_token_logprobs"][1:]], ids_of(j["meta_info"]["routed_experts"])


for name, (path, layers, experts, k) in MODELS.items():
    s = RefitServer(REFIT, path)
    try:
        per = layers * k
        status, j = s.post("/generate", {"input_ids": PROMPT,
                                         "sampling_params": {"max_new_tokens": 6, "temperature": 0},
                                         "return_routed_experts": True})
        check(status == 200, f"{name}: /generate return_routed_experts -> {status} {j}")
        out = j["output_ids"]
        routed = ids_of(j["meta_info"]["routed_experts"])
        rows = len(PROMPT) + len(out) - 1
        check(len(routed) == rows * per,
              f"{name}: {len(routed)} ids routed, expected [{rows}, {layers}, {k}]")
        check(all(0 <= e < experts for e in routed), f"{name}: expert ids out of range")
        check(all(len(set(routed[i:i + k])) == k for i in range(0, len(routed), k)),
              f"{name}: a token went to one expert twice")
        # routed_experts_start_len: the rows from that position on.
        status, j2 = s.post("/generate", {"input_ids": PROMPT,
                                          "sampling_params": {"max_new_tokens": 6, "temperature": 0},
                                          "return_routed_experts": True,
                                          "routed_experts_start_len": 3})
        check(status == 200 and ids_of(j2["meta_info"]["routed_experts"]) == routed[3 * per:],
              f"{name}: routed_experts_start_len 3 is not the rows from 3 on")

        # Rescoring the rollout: its own routing forced changes nothing, bitwise.
        seq = PROMPT + out
        free_lp, free_routed = rescore(s, seq)
        check(free_routed[:rows * per] == routed,
              f"{name}: rescoring routes the rollout's positions differently")
        forced_lp, forced_routed = rescore(s, seq, b64_of(routed))
        check(forced_lp == free_lp and len(free_lp) == len(seq) - 1,
              f"{name}: forcing the rollout's own routing changed logprobs")
        # Another routing (every id moved to the next expert): other logprobs, reported as routed.
        other = [(e + 1) % experts for e in routed]
        other_lp, other_routed = rescore(s, seq, b64_of(other))
        check(other_lp != free_lp, f"{name}: forcing another routing changed no logprob")
        check(other_routed[:rows * per] == other, f"{name}: forced routing not reported back")

        # Refused, naming the field; the server keeps serving.
        for bad, what in ((b64_of(routed[:-1]), "not whole positions"),
                          (b64_of([99] * per), "expert 99"),
                          ("not base64!", "base64")):
            status, j = s.post("/generate", {"input_ids": seq, "sampling_params": {"max_new_tokens": 0},
                                             "routed_experts": bad})
            check(status == 400 and "routed_experts" in str(j),
                  f"{name}: bad routed_experts ({what}) -> {status} {j}")
        status, j = s.post("/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}})
        check(status == 200, f"{name}: server stopped serving after refused routing: {status}")
    finally:
        s.stop()

# Tensor and expert parallelism: every rank routes alike, forced routing included.
path, layers, experts, k = MODELS["gpt-oss"]
one = RefitServer(REFIT, path)
try:
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 6, "temperature": 0},
            "return_routed_experts": True}
    status, want = one.post("/generate", body)
    check(status == 200, f"gpt-oss TP 1 -> {status}")
    seq = PROMPT + want["output_ids"]
    other = b64_of([(e + 1) % experts for e in ids_of(want["meta_info"]["routed_experts"])])
    want_other_lp, _ = rescore(one, seq, other)
finally:
    one.stop()
for extra in ([], ["--ep"]):
    s = RefitServer(REFIT, path, *extra, tp=2)
    try:
        what = "gpt-oss --tp 2 " + " ".join(extra)
        status, got = s.post("/generate", body)
        check(status == 200 and got["output_ids"] == want["output_ids"],
              f"{what}: tokens {got.get('output_ids')} vs TP 1 {want['output_ids']}")
        check(got["meta_info"]["routed_experts"] == want["meta_info"]["routed_experts"],
              f"{what}: routing differs from TP 1")
        free_lp, _ = rescore(s, seq)
        forced_lp, _ = rescore(s, seq, got["meta_info"]["routed_experts"])
        check(forced_lp == free_lp, f"{what}: forcing the rollout's routing changed logprobs")
        # Another routing forced on every rank gives what one process gives with it.
        other_lp, _ = rescore(s, seq, other)
        check(len(other_lp) == len(want_other_lp) and
              max(abs(a - b) for a, b in zip(other_lp, want_other_lp)) < 1e-4,
              f"{what}: forced routing differs from TP 1's (did it reach every rank?)")
    finally:
        s.stop()

s = RefitServer(REFIT, STORIES)
try:
    status, j = s.post("/generate", {"input_ids": [1, 403, 407], "return_routed_experts": True})
    check(status == 400 and "return_routed_experts" in str(j), f"dense model routed experts -> {status} {j}")
finally:
    s.stop()

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("routing replay: ok")
