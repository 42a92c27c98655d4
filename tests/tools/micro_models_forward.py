"""Float64 numpy forward passes of the micro Gemma 3 and Phi-3 models, read from their Hugging Face
folders and written from transformers' semantics (modeling_gemma3.py, modeling_phi3.py,
modeling_rope_utils.py), not from llama.cpp's graph, so that agreeing with llama.cpp's logits means
something. make_micro_models.py --check compares them with the llama.cpp references.
"""

import json
import math
import struct
from pathlib import Path

import numpy as np


def read_safetensors(path):
    """name -> float32 array. The format: u64 little-endian header length, JSON header, raw data."""
    blob = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(blob[base + begin:base + end], dtype="<f4").reshape(info["shape"])
    return tensors


def load_hf(folder):
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    weights = {k: v.astype(np.float64) for k, v in read_safetensors(folder / "model.safetensors").items()}
    return config, weights


def rmsnorm(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def gelu_tanh(x):
    # transformers' gelu_pytorch_tanh
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_tanh_ggml_cpu(x):
    """ggml-cpu's GELU with GGML_GELU_FP16 (always defined in ggml-cpu/vec.h): the input is rounded to
    fp16, looked up in a table of fp16(gelu(fp16 value)), and |x| >= 10 bypasses the table."""
    table = gelu_tanh(x.astype(np.float16).astype(np.float32).astype(np.float64))
    y = table.astype(np.float16).astype(np.float64)
    y = np.where(x <= -10.0, 0.0, y)
    return np.where(x >= 10.0, x, y)


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope_neox(x, positions, inv_freq, scale=1.0):
    """x: [T, heads, d]. Rotates pairs (i, i + d/2) by positions * inv_freq[i] (transformers'
    rotate_half), cos and sin multiplied by scale (LongRoPE's attention factor)."""
    # inv_freq may be per position: [T, d/2]
    inv = inv_freq if inv_freq.ndim == 2 else np.broadcast_to(inv_freq, (len(positions), inv_freq.shape[0]))
    ang = positions[:, None].astype(np.float64) * inv
    cos = (np.cos(ang) * scale)[:, None, :]
    sin = (np.sin(ang) * scale)[:, None, :]
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def attention(q, k, v, scale, window):
    """q: [T, H, d], k/v: [T, KV, d]; causal, and when window is set a key at distance >= window is
    masked (transformers: kv_idx > q_idx - sliding_window)."""
    n_tok, n_head, _ = q.shape
    group = n_head // k.shape[1]
    qi = np.arange(n_tok)[:, None]
    ki = np.arange(n_tok)[None, :]
    visible = ki <= qi
    if window is not None:
        visible &= (qi - ki) < window
    out = np.empty_like(q)
    for h in range(n_head):
        s = q[:, h, :] @ k[:, h // group, :].T * scale
        s = np.where(visible, s, -np.inf)
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out[:, h, :] = p @ v[:, h // group, :]
    return out.reshape(n_tok, -1)


def default_inv_freq(base, dim):
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def gemma3_layer_types(config):
    if "layer_types" in config:
        return config["layer_types"]
    pattern = config.get("sliding_window_pattern", 6)
    return ["sliding_attention" if (i + 1) % pattern else "full_attention"
            for i in range(config["num_hidden_layers"])]


def gemma3_forward(config, w, ids, ggml_gelu=False, ablate=()):
    """Gemma3ForCausalLM logits for every position of ids (one causal forward). ablate names features
    to get wrong on purpose, to measure how much each one matters: no_embed_scale, no_post_norms,
    no_swa, window_plus_1, scaling_on_local, no_scaling, local_base_global."""
    eps = config["rms_norm_eps"]
    n_head, n_kv, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    pos = np.arange(len(ids))
    # Gemma3RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w)
    norm = lambda x, name: rmsnorm(x, eps) * (1.0 + w[name])
    act = gelu_tanh_ggml_cpu if ggml_gelu else gelu_tanh
    scaling = config["rope_scaling"] or {}
    inv_global = default_inv_freq(config["rope_theta"], hd)
    linear = scaling.get("factor", 1.0) if scaling.get("rope_type", scaling.get("type")) == "linear" else 1.0
    if "no_scaling" in ablate:
        linear = 1.0
    inv_global = inv_global / linear
    # local layers use rope_local_base_freq and never the rope_scaling of the global layers
    inv_local = default_inv_freq(config["rope_theta"] if "local_base_global" in ablate
                                 else config.get("rope_local_base_freq", 10000.0), hd)
    if "scaling_on_local" in ablate:
        inv_local = inv_local / linear
    window = config["sliding_window"] + (1 if "window_plus_1" in ablate else 0)
    post = (lambda x, name: x) if "no_post_norms" in ablate else norm
    x = w["model.embed_tokens.weight"][ids]
    if "no_embed_scale" not in ablate:
        x = x * np.float64(np.float32(config["hidden_size"] ** 0.5))
    for il, kind in enumerate(gemma3_layer_types(config)):
        p = f"model.layers.{il}."
        h = norm(x, p + "input_layernorm.weight")
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(len(ids), n_head, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(len(ids), n_kv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(len(ids), n_kv, hd)
        q = norm(q, p + "self_attn.q_norm.weight")
        k = norm(k, p + "self_attn.k_norm.weight")
        sliding = kind == "sliding_attention" and "no_swa" not in ablate
        inv = inv_local if sliding else inv_global
        q, k = rope_neox(q, pos, inv), rope_neox(k, pos, inv)
        o = attention(q, k, v, config["query_pre_attn_scalar"] ** -0.5, window if sliding else None)
        o = o @ w[p + "self_attn.o_proj.weight"].T
        x = x + post(o, p + "post_attention_layernorm.weight")
        h = norm(x, p + "pre_feedforward_layernorm.weight")
        m = act(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        m = m @ w[p + "mlp.down_proj.weight"].T
        x = x + post(m, p + "post_feedforward_layernorm.weight")
    x = norm(x, "model.norm.weight")
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])  # tied
    logits = x @ head.T
    cap = config.get("final_logit_softcapping")
    if cap:
        logits = np.tanh(logits / cap) * cap
    return logits


def phi3_longrope(config):
    """(short inv_freq, long inv_freq, attention factor, original context) as transformers'
    _compute_longrope_parameters computes them."""
    rs = config["rope_scaling"]
    hd = config["hidden_size"] // config["num_attention_heads"]
    dim = int(hd * config.get("partial_rotary_factor", 1.0))
    orig = config.get("original_max_position_embeddings", rs.get("original_max_position_embeddings"))
    factor = config["max_position_embeddings"] / orig
    attn = rs.get("attention_factor")
    if attn is None:
        attn = math.sqrt(1 + math.log(factor) / math.log(orig)) if factor > 1.0 else 1.0
    base = default_inv_freq(config["rope_theta"], dim)
    # the factors are float32 tensors in both transformers and the GGUF
    short = base / np.asarray(rs["short_factor"], dtype=np.float32).astype(np.float64)
    long_ = base / np.asarray(rs["long_factor"], dtype=np.float32).astype(np.float64)
    return short, long_, attn, orig


def phi3_inv_freq_per_position(config, n_positions, regime, n_prompt=None):
    """regime 'short' / 'long': one factor set for every position (what llama.cpp does, chosen once per
    context). 'hf-incremental': transformers' generate(): the prompt forward picks by its own length,
    each later one-token forward by (position + 1) > original_max_position_embeddings, and cached keys
    keep the rotation they were computed with."""
    short, long_, _, orig = phi3_longrope(config)
    rows = []
    for p in range(n_positions):
        if regime == "short":
            use_long = False
        elif regime == "long":
            use_long = True
        else:
            use_long = (n_prompt > orig) if p < n_prompt else (p + 1 > orig)
        rows.append(long_ if use_long else short)
    return np.stack(rows)


def phi3_forward(config, w, ids, regime, n_prompt=None, ablate=()):
    """Phi3ForCausalLM logits for every position of ids. ablate: no_attn_factor, gate_up_swapped,
    k_v_swapped (features got wrong on purpose)."""
    eps = config["rms_norm_eps"]
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    hd = config["hidden_size"] // n_head
    n_ff = config["intermediate_size"]
    pos = np.arange(len(ids))
    _, _, attn_factor, _ = phi3_longrope(config)
    if "no_attn_factor" in ablate:
        attn_factor = 1.0
    inv = phi3_inv_freq_per_position(config, len(ids), regime, n_prompt)
    x = w["model.embed_tokens.weight"][ids]
    for il in range(config["num_hidden_layers"]):
        p = f"model.layers.{il}."
        h = rmsnorm(x, eps) * w[p + "input_layernorm.weight"]
        qkv = h @ w[p + "self_attn.qkv_proj.weight"].T
        # Phi3Attention: query_pos = num_heads * head_dim, then k, then v
        q = qkv[:, :n_head * hd].reshape(len(ids), n_head, hd)
        k = qkv[:, n_head * hd:(n_head + n_kv) * hd].reshape(len(ids), n_kv, hd)
        v = qkv[:, (n_head + n_kv) * hd:].reshape(len(ids), n_kv, hd)
        if "k_v_swapped" in ablate:
            k, v = v, k
        q, k = rope_neox(q, pos, inv, attn_factor), rope_neox(k, pos, inv, attn_factor)
        o = attention(q, k, v, hd ** -0.5, config.get("sliding_window"))
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, eps) * w[p + "post_attention_layernorm.weight"]
        gu = h @ w[p + "mlp.gate_up_proj.weight"].T
        # Phi3MLP: gate, up = chunk(2): the first n_ff outputs are the gate
        gate, up = (gu[:, n_ff:], gu[:, :n_ff]) if "gate_up_swapped" in ablate else (gu[:, :n_ff], gu[:, n_ff:])
        x = x + (silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, eps) * w["model.norm.weight"]
    return x @ w["lm_head.weight"].T
