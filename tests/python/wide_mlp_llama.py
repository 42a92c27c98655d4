"""A one-layer llama checkpoint with MLP rows of 17 Q8_0 blocks, written for the quantized
layout and export tests (a helper module like safetensors_io, not a test)."""
import json

import torch

import safetensors_io
from conftest import STORIES_HF, require

PROMPT = [1, 5, 9, 200, 17]


def write_model(folder, seed):
    """A one-layer llama whose MLP input rows hold 544 values (17 blocks of 32: one run of
    16 blocks, which the interleave permutes, and a tail block it leaves in place)."""
    config = json.loads(require(STORIES_HF / "config.json").read_text())
    config.update(num_hidden_layers=1, intermediate_size=544)
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    g = torch.Generator().manual_seed(seed)
    d, f, v, kv = config["hidden_size"], 544, config["vocab_size"], config["num_key_value_heads"]
    kv_dim = d // config["num_attention_heads"] * kv
    shapes = {
        "model.embed_tokens.weight": (v, d),
        "model.norm.weight": (d,),
        "model.layers.0.input_layernorm.weight": (d,),
        "model.layers.0.post_attention_layernorm.weight": (d,),
        "model.layers.0.self_attn.q_proj.weight": (d, d),
        "model.layers.0.self_attn.k_proj.weight": (kv_dim, d),
        "model.layers.0.self_attn.v_proj.weight": (kv_dim, d),
        "model.layers.0.self_attn.o_proj.weight": (d, d),
        "model.layers.0.mlp.gate_proj.weight": (f, d),
        "model.layers.0.mlp.up_proj.weight": (f, d),
        "model.layers.0.mlp.down_proj.weight": (d, f),
    }
    weights = {n: torch.randn(s, generator=g) * 0.1 for n, s in shapes.items()}
    safetensors_io.save(weights, folder / "model.safetensors")
    return weights
