#!/usr/bin/python3
"""Hugging Face config.json fields honoured, refused by name, or reported (CTest runs this
file; argv[1] is refit).

1. Each case of tests/data/hf_config_cases (a real config from ../shared/realhf shrunk with
   one field set: rope linear / dynamic / yarn with mscale and truncate false, Phi-3's
   partial_rotary_factor, Qwen's use_sliding_window + max_window_layers, layer_types on
   Qwen3 and Mistral, attention_bias on Llama and Qwen3, mlp_bias, hidden_act gelu and
   gelu_pytorch_tanh): its checkpoint is rebuilt here (tests/tools/hf_config_cases.py
   build, sha256 checked) and refit's logits must be within the case's tolerance of the
   float64 transformers-semantics logits. Each case records how far the plausible
   misreadings land (contrast_rel_err: the field ignored, or the neighbouring reading);
   the test asserts they are >= 10x the tolerance, so each misreading would fail it.
2. A field in none of refit's tables is named in the load warning and by `refit inspect`,
   which also lists what was honoured.
3. Fields that change the maths and that refit does not run are refused naming the file
   and the field.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from logits_reference import floats, refit_logits, relative_error  # noqa: E402

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(ROOT, "tests", "data", "hf_config_cases")
TOOL = os.path.join(ROOT, "tests", "tools", "hf_config_cases.py")
failures = []


def build(name, tmp):
    ckpt = os.path.join(tmp, name)
    r = subprocess.run(["/usr/bin/python3", TOOL, "build", os.path.join(CASES, name), ckpt],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        failures.append(f"{name}: build failed: {r.stderr[-500:]}")
        return None
    return ckpt


def generate(ckpt, ids, logits):
    return refit_logits(REFIT, ckpt, ids, logits)


def check_case(name, tmp):
    case = json.load(open(os.path.join(CASES, name, "case.json")))
    tol = case["tolerance"]
    for what, err in case["contrast_rel_err"].items():
        if not err >= 10 * tol:
            failures.append(f"{name}: misreading '{what}' lands at {err:.2e}, not 10x above tolerance {tol}")
    ckpt = build(name, tmp)
    if not ckpt:
        return
    logits = os.path.join(tmp, name + ".f32")
    r = generate(ckpt, case["prompt_ids"], logits)
    if r.returncode != 0:
        failures.append(f"{name}: refit generate failed: {r.stderr[-500:]}")
        return
    if "not recognised" in r.stderr:
        failures.append(f"{name}: unexpected warning: {r.stderr.strip()[-300:]}")
    rel = relative_error(floats(logits), floats(os.path.join(CASES, name, "expected_logits.f32")))
    if rel is None:
        failures.append(f"{name}: fewer logits than the reference has")
        return
    print(f"{name}: max|got - ref| / max|ref| = {rel:.2e} (tolerance {tol})")
    if not rel <= tol:
        failures.append(f"{name}: relative error {rel:.3e} above {tol}")


def with_config(src, tmp, name, change):
    """A copy of checkpoint folder `src` whose config.json is changed by `change(cfg)`."""
    dst = os.path.join(tmp, name)
    shutil.copytree(src, dst)
    path = os.path.join(dst, "config.json")
    cfg = json.load(open(path))
    change(cfg)
    json.dump(cfg, open(path, "w"), indent=1)
    return dst


def check_unrecognised_and_refused(tmp):
    base = build("llama-attention-bias", tmp)
    if not base:
        return
    ids = [1, 2, 3]
    unknown = with_config(base, tmp, "unknown", lambda c: c.update(refit_test_unknown_field=7))
    r = generate(unknown, ids, os.path.join(tmp, "u.f32"))
    want = "config fields not recognised, ignored: refit_test_unknown_field"
    if r.returncode != 0 or want not in r.stderr:
        failures.append(f"unknown field: generate rc {r.returncode}, stderr lacks '{want}': {r.stderr[-400:]}")
    r = subprocess.run([REFIT, "inspect", unknown], capture_output=True, text=True, timeout=120)
    out = r.stdout
    section = out[out.find("config fields not recognised"):]
    if r.returncode != 0 or "refit_test_unknown_field" not in section:
        failures.append(f"unknown field: inspect does not list it: {out[:1500]}")
    if "attention_bias (q, k, v and o_proj biases)" not in out:
        failures.append(f"inspect does not list attention_bias as honoured: {out[:1500]}")
    r = subprocess.run([REFIT, "inspect", "--json", unknown], capture_output=True, text=True, timeout=120)
    try:
        j = json.loads(r.stdout)["config"]
        if j.get("unrecognised_ignored") != ["refit_test_unknown_field"]:
            failures.append(f"inspect --json config section: {j}")
    except (ValueError, KeyError) as e:
        failures.append(f"inspect --json: {e}: {r.stdout[:300]}")

    # Each changes the logits and refit does not run it: refused naming file and field.
    refused = {
        "attn_logit_softcapping": lambda c: c.update(attn_logit_softcapping=30.0),
        "hidden_act": lambda c: c.update(hidden_act="relu"),
        "partial_rotary_factor": lambda c: c.update(partial_rotary_factor=0.5),
        "rope_scaling type 'ntk-by-parts'": lambda c: c.update(rope_scaling={"rope_type": "ntk-by-parts", "factor": 2}),
        "num_local_experts": lambda c: c.update(num_local_experts=8),
    }
    for i, (field, change) in enumerate(refused.items()):
        d = with_config(base, tmp, f"refused{i}", change)
        r = generate(d, ids, os.path.join(tmp, f"r{i}.f32"))
        if r.returncode == 0 or "config.json" not in r.stderr or field not in r.stderr:
            failures.append(f"{field}: not refused by name (rc {r.returncode}): {r.stderr[-300:]}")
        else:
            print(f"refused: {r.stderr.strip().splitlines()[-1]}")


with tempfile.TemporaryDirectory() as tmp:
    for name in sorted(os.listdir(CASES)):
        check_case(name, tmp)
    check_unrecognised_and_refused(tmp)

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
