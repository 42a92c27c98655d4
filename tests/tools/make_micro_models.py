#!/usr/bin/python3
"""Writes the micro Gemma 3 and Phi-3 models of tests/data/llamacpp/ and their llama.cpp references.

Each model is written twice from one set of float32 weights: a GGUF laid out exactly as llama.cpp's
convert_hf_to_gguf.py (Gemma3Model, Phi3MiniModel) writes it, and a Hugging Face folder (config.json,
model.safetensors) in transformers' names and conventions. Every transform the converter applies
(Gemma RMSNorm weight + 1, the LongRoPE factor tensors and attention factor) is applied here too, so
the two files are one model.

  PYTHONPATH=<llama.cpp>/gguf-py /usr/bin/python3 tests/tools/make_micro_models.py write
  PYTHONPATH=<llama.cpp>/gguf-py /usr/bin/python3 tests/tools/make_micro_models.py run --runner <llamacpp_logits>
  /usr/bin/python3 tests/tools/make_micro_models.py --check

Weights are N(0, std) draws from numpy PCG64 seeded with SeedSequence([seed, crc32(gguf tensor name)]),
with the stds of ../shared/oracle/llamacpp/README.md ("Weights").
"""

import argparse
import json
import math
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import micro_models_forward as fwd  # noqa: E402

OUT_ROOT = Path(__file__).resolve().parents[1] / "data" / "llamacpp"
SEED = 1
N_GEN = 24

# ---------------------------------------------------------------------------------------------
# Vocabulary: a tiny SentencePiece-style vocab: specials, the 256 byte tokens, "▁", a-z and the
# "▁"-prefix chains of a few words (every prefix is a token so llama.cpp's SPM merges reach the word).

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "big", "red", "sun", "is", "hot", "and"]


@dataclass
class Vocab:
    tokens: list
    scores: list
    types: list
    bos: int
    eos: int
    unk: int
    pad: int

    def id(self, piece):
        return self.tokens.index(piece)


def make_vocab(specials):
    """specials: list of (piece, roles) in id order; roles a subset of bos/eos/unk/pad/other."""
    tokens, scores, types, roles = [], [], [], {}
    for piece, piece_roles in specials:
        for role in piece_roles.split("+"):
            roles[role] = len(tokens)
        tokens.append(piece)
        scores.append(0.0)
        types.append(TOKEN_UNKNOWN if piece_roles == "unk" else TOKEN_CONTROL)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(TOKEN_BYTE)
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    for word in WORDS:
        for n in range(1, len(word) + 1):
            piece = "\u2581" + word[:n]
            if piece not in pieces:
                pieces.append(piece)
    for i, piece in enumerate(pieces):
        tokens.append(piece)
        scores.append(-float(i))  # SentencePiece scores are log-probabilities: all negative here
        types.append(TOKEN_NORMAL)
    return Vocab(tokens, scores, types, roles["bos"], roles["eos"], roles["unk"], roles["pad"])


# Gemma's id layout (pad 0, eos 1, bos 2, unk 3), and Llama's (unk 0, bos 1, </s> 2) plus Phi-3's
# <|endoftext|> (eos and pad, as in Phi-3's config). llama.cpp needs <unk>, <s>, </s> and <|endoftext|>
# in any vocab whose general.name contains "phi3" (llama_vocab::impl::load sets their attributes).
GEMMA_VOCAB = make_vocab([("<pad>", "pad"), ("<eos>", "eos"), ("<bos>", "bos"), ("<unk>", "unk")])
PHI3_VOCAB = make_vocab([("<unk>", "unk"), ("<s>", "bos"), ("</s>", "other"), ("<|endoftext|>", "eos+pad")])


def encode(vocab, text):
    """Token ids llama.cpp's SPM tokenizer gives for text (after its space -> ▁ mapping) with this vocab:
    each word becomes its longest prefix chain piece, the rest single letters or byte tokens."""
    ids = [vocab.bos]
    s = text.replace(" ", "\u2581")
    i = 0
    while i < len(s):
        best = None
        for j in range(len(s), i, -1):
            if s[i:j] in vocab.tokens and (j - i == 1 or s[i] == "\u2581"):
                best = j
                break
        if best is None:
            ids += [vocab.id(f"<0x{b:02X}>") for b in s[i].encode("utf-8")]
            i += 1
        else:
            ids.append(vocab.id(s[i:best]))
            i = best
    return ids


# Prompts as text so llama-completion can cross-check them. Both tokenize as " " + text: Gemma's GGUF
# says add_space_prefix = false (so llama-completion gets the leading space in the text), Phi-3's has no
# such key and llama.cpp's SPM default adds the space itself.
PROMPT_TEXTS = {
    "p05": "the cat sat on",
    "p12": "the big red dog ran on a hot mat!?",
    "p20": "the sun is hot and the dog sat on a big red mat, xq the cat",
}


# ---------------------------------------------------------------------------------------------
# Weights

STD = {"token_embd": 0.18, "output": 0.18, "attn_q": 0.10, "attn_k": 0.10, "attn_v": 0.08,
       "attn_output": 0.20, "ffn_gate": 0.08, "ffn_up": 0.08, "ffn_down": 0.15}


def draw(name, shape, std):
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([SEED, zlib.crc32(name.encode())])))
    return (rng.standard_normal(shape) * std).astype(np.float32)


def draw_matrix(gguf_name, shape):
    kind = gguf_name.split(".")[-2]
    return draw(gguf_name, shape, STD[kind])


def draw_norm_gain(gguf_name, dim, extra=1.0):
    """The multiplier the norm applies, 1 + 0.2 N(0, 1) (output_norm: times 4)."""
    return ((1.0 + draw(gguf_name, (dim,), 0.2).astype(np.float64)) * extra).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Models

@dataclass
class Run:
    prompt: str
    n_ctx: int

    @property
    def name(self):
        return f"{self.prompt}_ctx{self.n_ctx}"


@dataclass
class Model:
    name: str
    arch: str
    shares_weights_with: str = None  # the HF folder then links to that model's model.safetensors
    rope_scaling_linear: float = None  # gemma3
    orig_ctx: int = None  # phi3
    max_ctx: int = None
    runs: list = field(default_factory=list)


MODELS = [
    Model("gemma3-micro", "gemma3", runs=[Run(p, 128) for p in PROMPT_TEXTS]),
    Model("gemma3-linear-micro", "gemma3", shares_weights_with="gemma3-micro", rope_scaling_linear=4.0,
          runs=[Run(p, 128) for p in PROMPT_TEXTS]),
    # llama.cpp pads n_ctx to a multiple of 256, so with an original context of 32 it always uses the
    # long factors; the orig256 twin (same weights) reaches both regimes: n_ctx 256 short, 512 long.
    Model("phi3-micro", "phi3", orig_ctx=32, max_ctx=128, runs=[Run(p, 128) for p in PROMPT_TEXTS]),
    Model("phi3-orig256-micro", "phi3", shares_weights_with="phi3-micro", orig_ctx=256, max_ctx=1024,
          runs=[Run(p, n) for n in (256, 512) for p in PROMPT_TEXTS]),
]

GEMMA3 = dict(hidden=64, n_head=4, n_kv=2, head_dim=32, ffn=128, n_layer=7, swa_pattern=6, window=8,
              base_local=10000.0, base_global=1e6, eps=1e-6, ctx=128)
# Gemma scales the embedding by sqrt(hidden) and ties it to the output, so with the pack's usual stds
# the residual stream is mostly the input token's embedding and greedy decoding repeats one id. Larger
# post-norm gains let the layers dominate; a larger output-norm gain brings the logit std to about 9.
GEMMA3_POST_NORM_GAIN = 2.5
GEMMA3_OUTPUT_NORM_GAIN = 6.0
PHI3 = dict(hidden=64, n_head=4, n_kv=2, ffn=96, n_layer=3, base=10000.0, eps=1e-5)
PHI3_SHORT_FACTOR = [1.0, 1.05, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0]
PHI3_LONG_FACTOR = [1.0, 1.25, 1.6, 2.0, 2.5, 3.1, 3.9, 4.8]


def vocab_of(arch):
    return GEMMA_VOCAB if arch == "gemma3" else PHI3_VOCAB


def prompt_ids(arch, prompt):
    text = PROMPT_TEXTS[prompt]
    return encode(vocab_of(arch), " " + text)


def gemma3_hf_config(m):
    g, v = GEMMA3, GEMMA_VOCAB
    layer_types = ["sliding_attention" if (i + 1) % g["swa_pattern"] else "full_attention" for i in range(g["n_layer"])]
    return {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "vocab_size": len(v.tokens), "hidden_size": g["hidden"], "intermediate_size": g["ffn"],
        "num_hidden_layers": g["n_layer"], "num_attention_heads": g["n_head"],
        "num_key_value_heads": g["n_kv"], "head_dim": g["head_dim"],
        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": g["ctx"],
        "rms_norm_eps": g["eps"], "rope_theta": g["base_global"], "rope_local_base_freq": g["base_local"],
        "rope_scaling": {"rope_type": "linear", "factor": m.rope_scaling_linear} if m.rope_scaling_linear else None,
        "sliding_window": g["window"], "sliding_window_pattern": g["swa_pattern"], "layer_types": layer_types,
        "query_pre_attn_scalar": g["head_dim"], "attention_bias": False, "attention_dropout": 0.0,
        "final_logit_softcapping": None, "attn_logit_softcapping": None, "tie_word_embeddings": True,
        "bos_token_id": v.bos, "eos_token_id": v.eos, "pad_token_id": v.pad,
        "initializer_range": 0.02, "use_cache": True, "torch_dtype": "float32",
    }


def phi3_hf_config(m):
    p, v = PHI3, PHI3_VOCAB
    return {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
        "vocab_size": len(v.tokens), "hidden_size": p["hidden"], "intermediate_size": p["ffn"],
        "num_hidden_layers": p["n_layer"], "num_attention_heads": p["n_head"],
        "num_key_value_heads": p["n_kv"], "hidden_act": "silu",
        "max_position_embeddings": m.max_ctx, "original_max_position_embeddings": m.orig_ctx,
        "rms_norm_eps": p["eps"], "rope_theta": p["base"],
        "rope_scaling": {"rope_type": "longrope", "short_factor": PHI3_SHORT_FACTOR, "long_factor": PHI3_LONG_FACTOR},
        # >= every sequence here: transformers applies it, llama.cpp ignores Phi-3's sliding window
        "sliding_window": m.max_ctx,
        "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0,
        "embd_pdrop": 0.0, "resid_pdrop": 0.0, "partial_rotary_factor": 1.0,
        "bos_token_id": v.bos, "eos_token_id": v.eos, "pad_token_id": v.pad,
        "initializer_range": 0.02, "use_cache": True, "torch_dtype": "float32",
    }


def gemma3_hf_weights():
    g, n_vocab = GEMMA3, len(GEMMA_VOCAB.tokens)
    d, hd = g["hidden"], g["head_dim"]

    def norm_w(gguf_name, dim, extra=1.0):
        # HF stores w with the norm computing (1 + w); the converter writes w + 1 to the GGUF.
        return (draw_norm_gain(gguf_name, dim, extra) - np.float32(1.0)).astype(np.float32)

    w = {"model.embed_tokens.weight": draw_matrix("token_embd.weight", (n_vocab, d))}
    for il in range(g["n_layer"]):
        p, b = f"model.layers.{il}.", f"blk.{il}."
        w[p + "input_layernorm.weight"] = norm_w(b + "attn_norm.weight", d)
        w[p + "self_attn.q_proj.weight"] = draw_matrix(b + "attn_q.weight", (g["n_head"] * hd, d))
        w[p + "self_attn.k_proj.weight"] = draw_matrix(b + "attn_k.weight", (g["n_kv"] * hd, d))
        w[p + "self_attn.v_proj.weight"] = draw_matrix(b + "attn_v.weight", (g["n_kv"] * hd, d))
        w[p + "self_attn.o_proj.weight"] = draw_matrix(b + "attn_output.weight", (d, g["n_head"] * hd))
        w[p + "self_attn.q_norm.weight"] = norm_w(b + "attn_q_norm.weight", hd)
        w[p + "self_attn.k_norm.weight"] = norm_w(b + "attn_k_norm.weight", hd)
        w[p + "post_attention_layernorm.weight"] = norm_w(b + "post_attention_norm.weight", d, GEMMA3_POST_NORM_GAIN)
        w[p + "pre_feedforward_layernorm.weight"] = norm_w(b + "ffn_norm.weight", d)
        w[p + "post_feedforward_layernorm.weight"] = norm_w(b + "post_ffw_norm.weight", d, GEMMA3_POST_NORM_GAIN)
        w[p + "mlp.gate_proj.weight"] = draw_matrix(b + "ffn_gate.weight", (g["ffn"], d))
        w[p + "mlp.up_proj.weight"] = draw_matrix(b + "ffn_up.weight", (g["ffn"], d))
        w[p + "mlp.down_proj.weight"] = draw_matrix(b + "ffn_down.weight", (d, g["ffn"]))
    w["model.norm.weight"] = norm_w("output_norm.weight", d, extra=GEMMA3_OUTPUT_NORM_GAIN)
    return w


def phi3_hf_weights():
    p, n_vocab = PHI3, len(PHI3_VOCAB.tokens)
    d = p["hidden"]
    hd = d // p["n_head"]
    w = {"model.embed_tokens.weight": draw_matrix("token_embd.weight", (n_vocab, d))}
    for il in range(p["n_layer"]):
        h, b = f"model.layers.{il}.", f"blk.{il}."
        w[h + "input_layernorm.weight"] = draw_norm_gain(b + "attn_norm.weight", d)
        # fused as transformers' Phi3 stores them: rows q (n_head*hd), k (n_kv*hd), v (n_kv*hd)
        w[h + "self_attn.qkv_proj.weight"] = np.concatenate([
            draw_matrix(b + "attn_q.weight", (p["n_head"] * hd, d)),
            draw_matrix(b + "attn_k.weight", (p["n_kv"] * hd, d)),
            draw_matrix(b + "attn_v.weight", (p["n_kv"] * hd, d))])
        w[h + "self_attn.o_proj.weight"] = draw_matrix(b + "attn_output.weight", (d, d))
        w[h + "post_attention_layernorm.weight"] = draw_norm_gain(b + "ffn_norm.weight", d)
        # rows gate (n_ff) then up (n_ff)
        w[h + "mlp.gate_up_proj.weight"] = np.concatenate([
            draw_matrix(b + "ffn_gate.weight", (p["ffn"], d)),
            draw_matrix(b + "ffn_up.weight", (p["ffn"], d))])
        w[h + "mlp.down_proj.weight"] = draw_matrix(b + "ffn_down.weight", (d, p["ffn"]))
    w["model.norm.weight"] = draw_norm_gain("output_norm.weight", d, extra=4.0)
    w["lm_head.weight"] = draw_matrix("output.weight", (n_vocab, d))
    return w


# ---------------------------------------------------------------------------------------------
# Writers

def write_safetensors(path, tensors):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in tensors.values():
            f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())


def write_hf(m, folder, config, weights):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    st = folder / "model.safetensors"
    if st.is_symlink() or st.exists():
        st.unlink()
    if m.shares_weights_with:
        st.symlink_to(Path("..", "..", m.shares_weights_with, "hf", "model.safetensors"))
    else:
        write_safetensors(st, weights)


def add_tokenizer(writer, vocab, add_space_prefix):
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(vocab.tokens)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.types)
    writer.add_bos_token_id(vocab.bos)
    writer.add_eos_token_id(vocab.eos)
    writer.add_unk_token_id(vocab.unk)
    writer.add_pad_token_id(vocab.pad)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    if add_space_prefix is not None:
        writer.add_add_space_prefix(add_space_prefix)


def gguf_tensors(arch, hf_weights, n_layer):
    """The converter's renaming (gguf-py's TensorNameMap) and transforms of the HF tensors."""
    import gguf
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3 if arch == "gemma3" else gguf.MODEL_ARCH.PHI3, n_layer)
    out = {}
    for name, t in hf_weights.items():
        new = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if arch == "gemma3" and name.endswith("norm.weight"):
            t = (t + np.float32(1.0)).astype(np.float32)  # Gemma3Model.norm_shift
        out[new] = t
    return out


def write_gguf(m, path, config, hf_weights):
    import gguf
    w = gguf.GGUFWriter(str(path), m.arch)
    w.add_type("model")
    w.add_name(m.name)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if m.arch == "gemma3":
        # TextModel.set_gguf_parameters + Gemma3Model.set_gguf_parameters; the converter writes no
        # sliding_window_pattern key: llama.cpp's gemma3 loader assumes 6.
        w.add_block_count(config["num_hidden_layers"])
        w.add_context_length(config["max_position_embeddings"])
        w.add_embedding_length(config["hidden_size"])
        w.add_feed_forward_length(config["intermediate_size"])
        w.add_head_count(config["num_attention_heads"])
        w.add_head_count_kv(config["num_key_value_heads"])
        if config["rope_scaling"]:
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(config["rope_scaling"]["factor"])
        w.add_rope_freq_base(config["rope_theta"])
        w.add_rope_freq_base_swa(config["rope_local_base_freq"])
        w.add_layer_norm_rms_eps(config["rms_norm_eps"])
        w.add_key_length(config["head_dim"])
        w.add_value_length(config["head_dim"])
        w.add_sliding_window(config["sliding_window"])
        add_tokenizer(w, GEMMA_VOCAB, add_space_prefix=False)
        tensors = gguf_tensors("gemma3", hf_weights, config["num_hidden_layers"])
    else:
        # Phi3MiniModel.set_gguf_parameters (it does not call TextModel's: no rope.scaling.type key)
        # and generate_extra_tensors (attn_factor, rope_factors_long/short).
        scale = config["max_position_embeddings"] / config["original_max_position_embeddings"]
        orig = config["original_max_position_embeddings"]
        w.add_context_length(config["max_position_embeddings"])
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_embedding_length(config["hidden_size"])
        w.add_feed_forward_length(config["intermediate_size"])
        w.add_block_count(config["num_hidden_layers"])
        w.add_head_count(config["num_attention_heads"])
        w.add_head_count_kv(config["num_key_value_heads"])
        w.add_layer_norm_rms_eps(config["rms_norm_eps"])
        w.add_rope_dimension_count(config["hidden_size"] // config["num_attention_heads"])
        w.add_rope_freq_base(config["rope_theta"])
        w.add_sliding_window(config["sliding_window"])
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
        add_tokenizer(w, PHI3_VOCAB, add_space_prefix=None)
        tensors = {
            "rope_factors_long.weight": np.asarray(config["rope_scaling"]["long_factor"], dtype=np.float32),
            "rope_factors_short.weight": np.asarray(config["rope_scaling"]["short_factor"], dtype=np.float32),
        }
        tensors.update(gguf_tensors("phi3", hf_weights, config["num_hidden_layers"]))
    for name, t in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def hf_config(m):
    return gemma3_hf_config(m) if m.arch == "gemma3" else phi3_hf_config(m)


def cmd_write(_args):
    weights = {"gemma3": gemma3_hf_weights(), "phi3": phi3_hf_weights()}
    for m in MODELS:
        folder = OUT_ROOT / m.name
        folder.mkdir(parents=True, exist_ok=True)
        config = hf_config(m)
        write_hf(m, folder / "hf", config, weights[m.arch])
        write_gguf(m, folder / f"{m.name}.gguf", config, weights[m.arch])
        print(f"wrote {folder}")


def cmd_run(args):
    for m in MODELS:
        folder = OUT_ROOT / m.name
        for r in m.runs:
            ids = prompt_ids(m.arch, r.prompt)
            cmd = [args.runner, str(folder / f"{m.name}.gguf"), str(r.n_ctx), str(folder), r.name] + [str(i) for i in ids]
            subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL if not args.verbose else None)
            print(f"{m.name} {r.name}: {len(ids)} prompt ids")


# ---------------------------------------------------------------------------------------------
# Check: the numpy forward of the HF folder against the llama.cpp references

def read_reference(folder, run_name):
    fields = {}
    for line in (folder / f"{run_name}.tokens.txt").read_text().splitlines():
        key, _, value = line.partition(": ")
        fields[key] = value
    n_vocab, n_pos = int(fields["n_vocab"]), int(fields["n_positions"])
    logits = np.fromfile(folder / f"{run_name}.logits.f32", dtype="<f4").reshape(n_pos, n_vocab)
    prompt = [int(t) for t in fields["prompt_ids"].split()]
    gen = [int(t) for t in fields["generated_ids"].split()]
    return prompt, gen, logits.astype(np.float64)


def llamacpp_longrope_regime(n_ctx, orig):
    # llama_context pads n_ctx to a multiple of 256; llama_model::get_rope_factors compares that
    # n_ctx_seq with the GGUF's rope.scaling.original_context_length.
    n_ctx_seq = -(-n_ctx // 256) * 256
    return "long" if n_ctx_seq > orig else "short"


def margins(logits, n_prompt):
    rows = logits[n_prompt - 1:n_prompt - 1 + N_GEN]
    top = np.sort(rows, axis=1)
    return top[:, -1] - top[:, -2]


def cmd_check(_args):
    print("| model | run | n_prompt | rows | variant | max abs diff | mean abs diff | argmax agree | min margin |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for m in MODELS:
        folder = OUT_ROOT / m.name
        config, w = fwd.load_hf(folder / "hf")
        for r in m.runs:
            prompt, gen, ref = read_reference(folder, r.name)
            assert prompt == prompt_ids(m.arch, r.prompt), (m.name, r.name)
            seq = prompt + gen
            assert all(np.argmax(ref[len(prompt) - 1 + k]) == gen[k] for k in range(len(gen)))
            # (label, logits, whether this variant models what llama.cpp computes)
            variants = []
            if m.arch == "gemma3":
                variants.append(("HF semantics, exact GELU", fwd.gemma3_forward(config, w, seq), False))
                variants.append(("HF semantics, GELU through ggml's fp16 table",
                                 fwd.gemma3_forward(config, w, seq, ggml_gelu=True), True))
            else:
                regime = llamacpp_longrope_regime(r.n_ctx, config["original_max_position_embeddings"])
                other = "short" if regime == "long" else "long"
                variants.append((f"{regime} factors (llama.cpp's choice)", fwd.phi3_forward(config, w, seq, regime), True))
                variants.append((f"{other} factors", fwd.phi3_forward(config, w, seq, other), False))
                variants.append(("HF generate(): factors by sequence length",
                                 fwd.phi3_forward(config, w, seq, "hf-incremental", len(prompt)), False))
            for label, got, models_llamacpp in variants:
                d = np.abs(got - ref)
                agree = int((got.argmax(1) == ref.argmax(1)).sum())
                if models_llamacpp:
                    worst = max(worst, d.max())
                print(f"| {m.name} | {r.name} | {len(prompt)} | {len(seq)} | {label} | {d.max():.3g} | {d.mean():.3g} "
                      f"| {agree}/{len(seq)} | {margins(ref, len(prompt)).min():.4g} |")
    print(f"\nworst max abs diff of the variant that models llama.cpp: {worst:.3g}")
    sensitivity()


SENSITIVITY = [
    ("gemma3-micro", ["no_embed_scale", "no_post_norms", "no_swa", "window_plus_1", "local_base_global"]),
    ("gemma3-linear-micro", ["no_scaling", "scaling_on_local"]),
    ("phi3-micro", ["no_attn_factor", "gate_up_swapped", "k_v_swapped"]),
]


def sensitivity():
    """How far each feature got wrong moves the logits from the llama.cpp references (all runs of
    the model): what a test at a given tolerance can tell apart."""
    print("\n| model | feature got wrong | max abs diff | mean abs diff | argmax agree |")
    print("|---|---|---|---|---|")
    for name, features in SENSITIVITY:
        m = next(x for x in MODELS if x.name == name)
        folder = OUT_ROOT / m.name
        config, w = fwd.load_hf(folder / "hf")
        for feature in features:
            dmax, dsum, n, agree = 0.0, 0.0, 0, 0
            for r in m.runs:
                prompt, gen, ref = read_reference(folder, r.name)
                seq = prompt + gen
                if m.arch == "gemma3":
                    got = fwd.gemma3_forward(config, w, seq, ggml_gelu=True, ablate=(feature,))
                else:
                    regime = llamacpp_longrope_regime(r.n_ctx, config["original_max_position_embeddings"])
                    got = fwd.phi3_forward(config, w, seq, regime, ablate=(feature,))
                d = np.abs(got - ref)
                dmax, dsum, n = max(dmax, d.max()), dsum + d.sum(), n + d.size
                agree += int((got.argmax(1) == ref.argmax(1)).sum())
            rows = sum(len(read_reference(folder, r.name)[2]) for r in m.runs)
            print(f"| {name} | {feature} | {dmax:.3g} | {dsum / n:.3g} | {agree}/{rows} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", choices=["write", "run"], help="write the models, or run llama.cpp on them")
    ap.add_argument("--check", action="store_true", help="compare the numpy forward of hf/ with the references")
    ap.add_argument("--runner", help="the llamacpp_logits binary (for run)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    if args.command == "write":
        cmd_write(args)
    elif args.command == "run":
        if not args.runner:
            ap.error("run needs --runner")
        cmd_run(args)
    if args.check:
        cmd_check(args)
    if not args.command and not args.check:
        ap.print_help()


if __name__ == "__main__":
    main()
