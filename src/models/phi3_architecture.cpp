// Phi-3 (and Phi-3.5 / Phi-4-mini text): Llama's block with q/k/v stored as one
// qkv_proj and gate/up as one gate_up_proj in the checkpoint (GGUF: attn_qkv, and the
// fused gate/up under ffn_up), LongRoPE scaling (per-frequency short/long factors and an
// attention factor on cos/sin), optional partial rotary dims and a sliding window.
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "models/architecture.h"

namespace refit {
namespace {

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  // partial_rotary_factor is read by the common code (it may sit in rope_parameters);
  // transformers' Phi-3 rotates the first int(head_dim * factor) dims and passes the rest.
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer())
    c.sliding_window = j["sliding_window"].get<int64_t>();
}

void configure_gguf(const GgufMetadata& m, ModelConfig& c) {
  // The longrope factors are tensors (rope_factors_long/short.weight): the loader reads
  // them; these keys say which to use and how much to scale cos/sin.
  if (auto original = m.get_u32("phi3.rope.scaling.original_context_length")) {
    c.rope_scaling.original_max_position = *original;
    c.rope_scaling.attention_factor = m.get_f32("phi3.rope.scaling.attn_factor").value_or(1.0f);
  }
  // llama.cpp ignores it (it warns that Phi's SWA is disabled); transformers applies it,
  // and so does refit, in both formats, so a GGUF and its HF folder are one model.
  c.sliding_window = m.get_u32("phi3.attention.sliding_window").value_or(0);
}

std::vector<TensorName> tensors() {
  return {
      {TensorSlot::token_embd, "model.embed_tokens.weight", "token_embd.weight"},
      {TensorSlot::attn_norm, "model.layers.{}.input_layernorm.weight", "blk.{}.attn_norm.weight"},
      {TensorSlot::attn_qkv, "model.layers.{}.self_attn.qkv_proj.weight", "blk.{}.attn_qkv.weight"},
      {TensorSlot::attn_output, "model.layers.{}.self_attn.o_proj.weight",
       "blk.{}.attn_output.weight"},
      {TensorSlot::ffn_norm, "model.layers.{}.post_attention_layernorm.weight",
       "blk.{}.ffn_norm.weight"},
      {TensorSlot::ffn_gate_up, "model.layers.{}.mlp.gate_up_proj.weight", "blk.{}.ffn_up.weight"},
      {TensorSlot::ffn_down, "model.layers.{}.mlp.down_proj.weight", "blk.{}.ffn_down.weight"},
      {TensorSlot::output_norm, "model.norm.weight", "output_norm.weight"},
      {TensorSlot::output, "lm_head.weight", "output.weight"},
  };
}

}  // namespace

const ArchitectureDef& phi3_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::phi3,
      .name = "phi3",
      .hf_names = {"Phi3ForCausalLM"},
      .tensors = tensors(),
      .hf_fields = {"partial_rotary_factor", "sliding_window"},
      .configure_hf = configure_hf,
      .configure_gguf = configure_gguf,
  };
  return def;
}

}  // namespace refit
