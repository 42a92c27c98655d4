#!/usr/bin/python3
"""gpt-oss's Hugging Face stacked expert names on the HTTP routes (argv[1]: the binary):
/get_weights_by_name of `mlp.experts.gate_up_proj` answers transformers' layout [E, dim, 2I]
(gate = even columns, up = odd) put together from the per-expert parameters, and
`down_proj` [E, I, dim]; the MXFP4 `_blocks` name is refused, naming the values' name."""
import os
import sys

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT_OSS = os.path.join(ROOT, "..", "shared", "oracle", "llamacpp", "gpt-oss-f32", "micro-gpt-oss-f32-s1.gguf")
E, D, I = 8, 128, 96
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


s = RefitServer(REFIT, GPT_OSS)
try:
    def read(name, n):
        status, j = s.post("/get_weights_by_name", {"name": name, "truncate_size": n})
        check(status == 200, f"{name} -> {status} {j}")
        return j

    stacked = read("model.layers.1.mlp.experts.gate_up_proj", D * 2 * I)
    check(stacked.get("shape") == [E, D, 2 * I], f"gate_up_proj shape {stacked.get('shape')}")
    gate = read("model.layers.1.mlp.experts.0.gate_proj.weight", I * D)["values"]
    up = read("model.layers.1.mlp.experts.0.up_proj.weight", I * D)["values"]
    v = stacked["values"]  # expert 0: [dim, 2I], element (k, 2i) = gate[i, k], (k, 2i+1) = up[i, k]
    check(len(v) == D * 2 * I, f"{len(v)} values of expert 0")
    check(all(v[k * 2 * I + 2 * i] == gate[i * D + k] and v[k * 2 * I + 2 * i + 1] == up[i * D + k]
              for k in range(D) for i in range(I)), "gate_up_proj is not gate/up interleaved, transposed")
    down = read("model.layers.1.mlp.experts.down_proj", 10)
    check(down.get("shape") == [E, I, D], f"down_proj shape {down.get('shape')}")
    d0 = read("model.layers.1.mlp.experts.0.down_proj.weight", 10 * I)["values"]  # [dim, I]
    check(down["values"][:10] == [d0[c * I] for c in range(10)], "down_proj is not the transpose")
    status, j = s.post("/get_weights_by_name", {"name": "model.layers.1.mlp.experts.down_proj_blocks"})
    check(status == 400 and "model.layers.1.mlp.experts.down_proj" in str(j), f"_blocks readback -> {status} {j}")
finally:
    s.stop()

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("stacked experts over HTTP: ok")
