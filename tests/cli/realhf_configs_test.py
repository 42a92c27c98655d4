#!/usr/bin/python3
"""Real Hugging Face config fields honoured (CTest runs this file; argv[1] is refit).

For each case of ../shared/realhf/configs (a real config.json shrunk, its tiny random-weight
checkpoint built by realhf/tools/tiny_ckpt.py, and the logits of an independent float64
transformers-semantics forward pass), refit's logits of the prompt must be within the case's
tolerance: max|got - ref| / max|ref|. The cases: Llama 3 rope scaling, the transformers v5
rope_parameters layout, Qwen3's head_dim and q/k norm, Mistral's sliding window, Qwen2.5's YaRN.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from logits_reference import floats, refit_logits, relative_error  # noqa: E402

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REALHF = os.path.join(ROOT, "..", "shared", "realhf")
failures = []


def check_case(name, tmp):
    case_dir = os.path.join(REALHF, "configs", name)
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    ckpt = os.path.join(tmp, name)
    build = subprocess.run(["/usr/bin/python3", os.path.join(REALHF, "tools", "tiny_ckpt.py"), "build",
                            case_dir, ckpt], capture_output=True, text=True, timeout=600)
    if build.returncode != 0:
        failures.append(f"{name}: tiny_ckpt build failed: {build.stderr[-500:]}")
        return
    ids = case["prompt_ids"]
    logits = os.path.join(tmp, name + ".f32")
    run = refit_logits(REFIT, ckpt, ids, logits)
    if run.returncode != 0:
        failures.append(f"{name}: refit generate failed: {run.stderr[-500:]}")
        return
    rel = relative_error(floats(logits), floats(os.path.join(case_dir, case["expected_logits"])))
    if rel is None:
        failures.append(f"{name}: fewer logits than the reference has")
        return
    print(f"{name}: max|got - ref| / max|ref| = {rel:.2e} (tolerance {case['tolerance']})")
    if not rel <= case["tolerance"]:
        failures.append(f"{name}: relative error {rel:.3e} above {case['tolerance']}")


with tempfile.TemporaryDirectory() as tmp:
    for name in sorted(os.listdir(os.path.join(REALHF, "configs"))):
        check_case(name, tmp)

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
