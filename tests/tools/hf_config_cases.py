#!/usr/bin/python3
"""Config-field cases: tiny random-weight checkpoints from real config.json files with one
field set, and float64 logits of a transformers-semantics forward pass for each.

The checkpoints come from ../shared/realhf/tools/tiny_ckpt.py (imported, not copied: its
shrink, --set, seeded weights and safetensors writer). Its reference forward models SiLU,
full-head rope and the Mistral/Qwen window rules only, so this file has its own forward
(same float64 arithmetic, written against transformers' modeling_llama / _mistral /
_qwen2 / _qwen3 / _phi3 and modeling_rope_utils) adding what the cases need:

  * hidden_act gelu (exact erf), gelu_pytorch_tanh / gelu_new (tanh), via torch's gelu;
  * partial rotary (Phi-3: q[..., :rot] rotated, the rest passed), fused qkv_proj and
    gate_up_proj (gate rows first: Phi3MLP's chunk(2));
  * layer_types, and Qwen's use_sliding_window / max_window_layers (default 28);
  * biases on q, k, v, o_proj and gate, up, down whenever the checkpoint has them;
  * rope "dynamic" as vLLM serves it: transformers' _compute_dynamic_ntk_parameters at
    seq_len = max_position_embeddings * factor, fixed for every length (transformers
    itself recomputes per length, which a KV cache cannot follow); other rope types go
    through tiny_ckpt's inv_freq_and_scale (linear, llama3, yarn with mscale/truncate).

  hf_config_cases.py regen CASES_DIR    write CASES_DIR/<case>/{case.json, expected_logits.f32}
  hf_config_cases.py build CASE_DIR OUT materialise a case's checkpoint (checks its sha256)

Each case records "contrast": the relative logit error a plausible misreading gives (the
field ignored, the neighbouring reading), so the test can check it would fail.
"""
import json
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REALHF = os.path.join(ROOT, "..", "shared", "realhf")
sys.path.insert(0, os.path.join(REALHF, "tools"))
import tiny_ckpt  # noqa: E402

PROMPT = [17, 203, 5, 88, 131, 42, 250, 9, 64, 177, 23, 111]
LLAMA = "llama3.2-1b-rope-llama3"
QWEN2 = "qwen2.5-yarn"
QWEN3 = "qwen3-0.6b-head-dim-qk-norm"
MISTRAL = "mistral-v0.3-sliding-window-16"
SMALL_CONTEXT = {"max_position_embeddings": 4096, "-rope_scaling": None}

# name: (real config case, --set overrides, seed, {contrast name: (config overrides, weight names dropped)})
CASES = {
    "llama-rope-linear": (LLAMA, dict(SMALL_CONTEXT, rope_scaling={"rope_type": "linear", "factor": 4.0}), 11,
                          {"no scaling": ({"rope_scaling": None}, [])}),
    "llama-rope-dynamic": (LLAMA, dict(SMALL_CONTEXT, rope_scaling={"rope_type": "dynamic", "factor": 2.0}), 12,
                           {"transformers per-length (unscaled below the context)": ({"rope_scaling": None}, [])}),
    "llama-yarn-mscale-no-truncate": (
        LLAMA, dict(SMALL_CONTEXT, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 1024,
                                                 "mscale": 0.707, "mscale_all_dim": 1.0, "truncate": False}), 13,
        {"truncated": ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                                         "mscale": 0.707, "mscale_all_dim": 1.0}}, []),
         "mscale ignored": ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 1024, "truncate": False}}, [])}),
    "phi3-partial-rotary": ("phi3:" + LLAMA, dict(SMALL_CONTEXT, partial_rotary_factor=0.5), 14,
                            {"whole head rotated": ({"partial_rotary_factor": 1.0}, [])}),
    "qwen2-use-sliding-window-max-window-layers": (
        QWEN2, {"-rope_scaling": None, "use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1}, 15,
        {"window on every layer": ({"max_window_layers": 0}, []),
         "use_sliding_window ignored": ({"use_sliding_window": False}, [])}),
    "qwen3-layer-types": (
        QWEN3, {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1,
                "layer_types": ["sliding_attention", "full_attention"]}, 16,
        {"max_window_layers rule instead": ({"layer_types": None}, [])}),
    "mistral-layer-types": (MISTRAL, {"sliding_window": 4, "layer_types": ["full_attention", "sliding_attention"]}, 17,
                            {"window on every layer": ({"layer_types": None}, [])}),
    "llama-attention-bias": (LLAMA, dict(SMALL_CONTEXT, attention_bias=True), 18,
                             {"o_proj bias ignored": ({}, ["self_attn.o_proj.bias"])}),
    "qwen3-attention-bias": (QWEN3, {"attention_bias": True}, 19,
                             {"o_proj bias ignored": ({}, ["self_attn.o_proj.bias"])}),
    "llama-mlp-bias": (LLAMA, dict(SMALL_CONTEXT, mlp_bias=True), 20,
                       {"down bias ignored": ({}, ["mlp.down_proj.bias"]),
                        "gate/up biases ignored": ({}, ["mlp.gate_proj.bias", "mlp.up_proj.bias"])}),
    "llama-hidden-act-gelu": (LLAMA, dict(SMALL_CONTEXT, hidden_act="gelu"), 21,
                              {"tanh gelu": ({"hidden_act": "gelu_pytorch_tanh"}, []),
                               "silu": ({"hidden_act": "silu"}, [])}),
    "llama-hidden-act-gelu-pytorch-tanh": (LLAMA, dict(SMALL_CONTEXT, hidden_act="gelu_pytorch_tanh"), 22,
                                           {"exact gelu": ({"hidden_act": "gelu"}, [])}),
}


# ------------------------------------------------------------------ checkpoints
def case_config(source, overrides):
    phi3 = source.startswith("phi3:")
    real = json.load(open(os.path.join(REALHF, "configs", source.split(":")[-1], "source_config.json")))
    c = tiny_ckpt.apply_set(tiny_ckpt.shrink(real), overrides)
    if phi3:  # a Llama config re-labelled Phi-3 (tiny_ckpt has no Phi-3): the same block, fused tensors
        c.update(architectures=["Phi3ForCausalLM"], model_type="phi3", sliding_window=None)
        for k in ("head_dim", "mlp_bias", "attention_bias", "pretraining_tp"):
            c.pop(k, None)
    return c


def weights(c, seed):
    if c["architectures"][0] != "Phi3ForCausalLM":
        return tiny_ckpt.make_weights(c, seed)
    t = tiny_ckpt.make_weights(dict(c, architectures=["LlamaForCausalLM"]), seed)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        q, k, v = (t.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv")
        t[p + "self_attn.qkv_proj.weight"] = np.concatenate([q, k, v])
        g, u = t.pop(p + "mlp.gate_proj.weight"), t.pop(p + "mlp.up_proj.weight")
        t[p + "mlp.gate_up_proj.weight"] = np.concatenate([g, u])
    return t


def build(case_dir, out):
    case = json.load(open(os.path.join(case_dir, "case.json")))
    os.makedirs(out, exist_ok=True)
    json.dump(case["config"], open(os.path.join(out, "config.json"), "w"), indent=1)
    sha = tiny_ckpt.write_safetensors(os.path.join(out, "model.safetensors"), weights(case["config"], case["seed"]))
    if sha != case["checkpoint_sha256"]:
        raise SystemExit(f"{case_dir}: checkpoint sha256 {sha} != recorded {case['checkpoint_sha256']}")


# ------------------------------------------------------------------ reference forward
def inv_freq(c, rot):
    """(inv_freq [rot/2], attention factor) for `rot` rotary dims, transformers semantics."""
    import torch
    theta, sc = tiny_ckpt.rope_params(c)
    kind = (sc or {}).get("rope_type") or (sc or {}).get("type")
    if kind == "dynamic":
        mp, factor = c["max_position_embeddings"], sc["factor"]
        seq_len = mp * factor  # vLLM: fixed at the served context
        base = theta * ((factor * seq_len / mp) - (factor - 1)) ** (rot / (rot - 2))
        return 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)), 1.0
    return tiny_ckpt.inv_freq_and_scale(c, rot, len(PROMPT))


def layer_windows(c):
    """transformers' layer_types: explicit list, else Mistral every layer, Qwen >= max_window_layers."""
    arch, L = c["architectures"][0], c["num_hidden_layers"]
    w = c.get("sliding_window")
    if arch.startswith("Qwen") and not c.get("use_sliding_window"):
        w = None
    types = c.get("layer_types")
    if types is None:
        if arch.startswith("Qwen"):
            mwl = c.get("max_window_layers")
            mwl = 28 if mwl is None else mwl
            types = ["sliding_attention" if i >= mwl else "full_attention" for i in range(L)]
        elif arch == "MistralForCausalLM" or arch == "Phi3ForCausalLM":
            types = ["sliding_attention"] * L
        else:
            types = ["full_attention"] * L
    return [w if (w is not None and t == "sliding_attention") else None for t in types]


def act_fn(name):
    import torch.nn.functional as F
    if name in ("silu", "swish"):
        return F.silu
    if name == "gelu":
        return lambda x: F.gelu(x, approximate="none")
    if name in ("gelu_pytorch_tanh", "gelu_new"):
        return lambda x: F.gelu(x, approximate="tanh")
    raise SystemExit(f"hidden_act {name!r} is not modelled")


def forward(c, t, ids):
    import torch
    torch.set_num_threads(1)
    T = lambda k: torch.from_numpy(np.asarray(t[k], dtype=np.float64))
    arch = c["architectures"][0]
    D, H = c["hidden_size"], c["num_attention_heads"]
    KV = c.get("num_key_value_heads") or H
    hd = c.get("head_dim") or D // H
    rot = int(hd * c.get("partial_rotary_factor", 1.0)) if arch == "Phi3ForCausalLM" else hd
    eps, n = c.get("rms_norm_eps", 1e-6), len(ids)
    act = act_fn(c.get("hidden_act", "silu"))

    def rms(x, w):
        return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))

    f, att = inv_freq(c, rot)
    ang = torch.outer(torch.arange(n, dtype=torch.float64), f)
    cos, sin = torch.cat([ang, ang], -1).cos() * att, torch.cat([ang, ang], -1).sin() * att

    def rope(x):  # x [n, heads, hd]: the first `rot` dims rotated (rotate_half), the rest passed
        xr, xp = x[..., :rot], x[..., rot:]
        half = torch.cat([-xr[..., rot // 2:], xr[..., : rot // 2]], -1)
        return torch.cat([xr * cos[:, None] + half * sin[:, None], xp], -1)

    x = T("model.embed_tokens.weight")[torch.tensor(ids)]
    for l, window in enumerate(layer_windows(c)):
        p = f"model.layers.{l}."

        def lin(name, inp):
            y = inp @ T(p + name + ".weight").T
            return y + T(p + name + ".bias") if p + name + ".bias" in t else y

        h = rms(x, T(p + "input_layernorm.weight"))
        if arch == "Phi3ForCausalLM":
            qkv = lin("self_attn.qkv_proj", h)
            q, k, v = qkv.split([H * hd, KV * hd, KV * hd], -1)
            q, k, v = q.reshape(n, H, hd), k.reshape(n, KV, hd), v.reshape(n, KV, hd)
        else:
            q = lin("self_attn.q_proj", h).view(n, H, hd)
            k = lin("self_attn.k_proj", h).view(n, KV, hd)
            v = lin("self_attn.v_proj", h).view(n, KV, hd)
        if arch == "Qwen3ForCausalLM":
            q = rms(q, T(p + "self_attn.q_norm.weight"))
            k = rms(k, T(p + "self_attn.k_norm.weight"))
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        allowed = j <= i
        if window is not None:
            allowed = allowed & (i - j < window)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        o = torch.einsum("hqk,khd->qhd", scores.masked_fill(~allowed, float("-inf")).softmax(-1), v)
        x = x + lin("self_attn.o_proj", o.reshape(n, H * hd))
        h = rms(x, T(p + "post_attention_layernorm.weight"))
        if arch == "Phi3ForCausalLM":
            gate, up = lin("mlp.gate_up_proj", h).chunk(2, dim=-1)
        else:
            gate, up = lin("mlp.gate_proj", h), lin("mlp.up_proj", h)
        x = x + lin("mlp.down_proj", act(gate) * up)
    x = rms(x, T("model.norm.weight"))
    W = T("lm_head.weight") if "lm_head.weight" in t else T("model.embed_tokens.weight")
    return (x @ W.T).numpy()


def regen(cases_dir):
    for name, (source, overrides, seed, contrasts) in CASES.items():
        c = case_config(source, overrides)
        t = weights(c, seed)
        ref = forward(c, t, PROMPT)
        d = os.path.join(cases_dir, name)
        os.makedirs(d, exist_ok=True)
        ref.astype("<f4").tofile(os.path.join(d, "expected_logits.f32"))
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            sha = tiny_ckpt.write_safetensors(os.path.join(tmp, "m.safetensors"), t)
        contrast = {}
        for what, (alt, dropped) in contrasts.items():
            t2 = {k: v for k, v in t.items() if not any(k.endswith(s) for s in dropped)}
            r2 = forward(tiny_ckpt.apply_set(dict(c), alt), t2, PROMPT)
            contrast[what] = float(np.abs(r2 - ref).max() / np.abs(ref).max())
        # refit's f32 forward lands within ~1e-6; the tolerance stays 10x below the nearest
        # misreading (the two GELUs differ by ~2e-4), so a misreading cannot pass.
        tolerance = min(1e-4, min(contrast.values()) / 10)
        case = {"about": f"{source} shrunk by tiny_ckpt with {json.dumps(overrides)}", "seed": seed,
                "config": c, "prompt_ids": PROMPT, "logits_shape": list(ref.shape),
                "checkpoint_sha256": sha, "tolerance": float(f"{tolerance:.2g}"), "contrast_rel_err": contrast}
        json.dump(case, open(os.path.join(d, "case.json"), "w"), indent=1)
        print(name, {k: f"{v:.2e}" for k, v in contrast.items()})


if __name__ == "__main__":
    if sys.argv[1] == "regen":
        regen(sys.argv[2])
    elif sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)
