#include "models/tensor_table.h"

#include <fmt/format.h>

#include "core/error.h"
#include "models/architecture.h"

namespace refit {

const char* slot_name(TensorSlot slot) {
  switch (slot) {
    case TensorSlot::token_embd:
      return "token_embd";
    case TensorSlot::attn_norm:
      return "attn_norm";
    case TensorSlot::attn_q:
      return "attn_q";
    case TensorSlot::attn_k:
      return "attn_k";
    case TensorSlot::attn_v:
      return "attn_v";
    case TensorSlot::attn_qkv:
      return "attn_qkv";
    case TensorSlot::attn_q_bias:
      return "attn_q_bias";
    case TensorSlot::attn_k_bias:
      return "attn_k_bias";
    case TensorSlot::attn_v_bias:
      return "attn_v_bias";
    case TensorSlot::attn_q_norm:
      return "attn_q_norm";
    case TensorSlot::attn_k_norm:
      return "attn_k_norm";
    case TensorSlot::attn_output:
      return "attn_output";
    case TensorSlot::attn_output_bias:
      return "attn_output_bias";
    case TensorSlot::ffn_gate_bias:
      return "ffn_gate_bias";
    case TensorSlot::ffn_up_bias:
      return "ffn_up_bias";
    case TensorSlot::ffn_down_bias:
      return "ffn_down_bias";
    case TensorSlot::post_attn_norm:
      return "post_attn_norm";
    case TensorSlot::ffn_norm:
      return "ffn_norm";
    case TensorSlot::ffn_gate:
      return "ffn_gate";
    case TensorSlot::ffn_up:
      return "ffn_up";
    case TensorSlot::ffn_gate_up:
      return "ffn_gate_up";
    case TensorSlot::ffn_down:
      return "ffn_down";
    case TensorSlot::post_ffn_norm:
      return "post_ffn_norm";
    case TensorSlot::output_norm:
      return "output_norm";
    case TensorSlot::output:
      return "output";
    case TensorSlot::attn_sinks:
      return "attn_sinks";
    case TensorSlot::ffn_router:
      return "ffn_router";
    case TensorSlot::ffn_router_bias:
      return "ffn_router_bias";
    case TensorSlot::ffn_gate_exps:
      return "ffn_gate_exps";
    case TensorSlot::ffn_up_exps:
      return "ffn_up_exps";
    case TensorSlot::ffn_down_exps:
      return "ffn_down_exps";
    case TensorSlot::ffn_gate_exps_bias:
      return "ffn_gate_exps_bias";
    case TensorSlot::ffn_up_exps_bias:
      return "ffn_up_exps_bias";
    case TensorSlot::ffn_down_exps_bias:
      return "ffn_down_exps_bias";
  }
  return "?";
}

namespace {

bool is_global(TensorSlot s) {
  return s == TensorSlot::token_embd || s == TensorSlot::output_norm || s == TensorSlot::output;
}

bool dense_ffn_slot(TensorSlot s) {
  switch (s) {
    case TensorSlot::ffn_gate:
    case TensorSlot::ffn_up:
    case TensorSlot::ffn_gate_up:
    case TensorSlot::ffn_down:
    case TensorSlot::ffn_gate_bias:
    case TensorSlot::ffn_up_bias:
    case TensorSlot::ffn_down_bias:
      return true;
    default:
      return false;
  }
}

bool moe_slot(TensorSlot s) {
  return s == TensorSlot::ffn_router || s == TensorSlot::ffn_router_bias || is_expert_slot(s);
}

// Whether layer `layer` of `c` has the slot at all (optional tensors).
bool slot_used(const ModelConfig& c, TensorSlot s, int64_t layer) {
  if (layer >= 0 && dense_ffn_slot(s) && c.layer(layer).ffn != FfnKind::dense) return false;
  if (layer >= 0 && moe_slot(s) && c.layer(layer).ffn != FfnKind::moe) return false;
  switch (s) {
    case TensorSlot::ffn_router_bias:
      return c.router_bias;
    case TensorSlot::ffn_gate_exps_bias:
    case TensorSlot::ffn_up_exps_bias:
    case TensorSlot::ffn_down_exps_bias:
      return c.expert_bias;
    case TensorSlot::attn_q_bias:
    case TensorSlot::attn_k_bias:
    case TensorSlot::attn_v_bias:
      return c.qkv_bias;
    case TensorSlot::attn_output_bias:
      return c.o_bias;
    case TensorSlot::ffn_gate_bias:
    case TensorSlot::ffn_up_bias:
    case TensorSlot::ffn_down_bias:
      return c.mlp_bias;
    case TensorSlot::attn_q_norm:
    case TensorSlot::attn_k_norm:
      return c.layer(layer).qk_norm;
    case TensorSlot::post_attn_norm:
    case TensorSlot::post_ffn_norm:
      return c.layer(layer).norms == NormPlacement::sandwich;
    case TensorSlot::output:
      return !c.tied_embeddings;
    case TensorSlot::attn_sinks:
      return c.attention_sinks;
    default:
      return true;
  }
}

Shape slot_shape(const ModelConfig& c, TensorSlot s) {
  switch (s) {
    case TensorSlot::token_embd:
    case TensorSlot::output:
      return {c.vocab_size, c.dim};
    case TensorSlot::attn_norm:
    case TensorSlot::post_attn_norm:
    case TensorSlot::ffn_norm:
    case TensorSlot::post_ffn_norm:
    case TensorSlot::output_norm:
    case TensorSlot::attn_output_bias:
    case TensorSlot::ffn_down_bias:
      return {c.dim};
    case TensorSlot::ffn_gate_bias:
    case TensorSlot::ffn_up_bias:
      return {c.ffn_dim};
    case TensorSlot::attn_q:
      return {c.q_dim(), c.dim};
    case TensorSlot::attn_k:
    case TensorSlot::attn_v:
      return {c.kv_dim(), c.dim};
    case TensorSlot::attn_qkv:
      return {c.q_dim() + 2 * c.kv_dim(), c.dim};
    case TensorSlot::attn_q_bias:
      return {c.q_dim()};
    case TensorSlot::attn_k_bias:
    case TensorSlot::attn_v_bias:
      return {c.kv_dim()};
    case TensorSlot::attn_q_norm:
    case TensorSlot::attn_k_norm:
      return {c.head_dim};
    case TensorSlot::attn_output:
      return {c.dim, c.q_dim()};
    case TensorSlot::ffn_gate:
    case TensorSlot::ffn_up:
      return {c.ffn_dim, c.dim};
    case TensorSlot::ffn_gate_up:
      return {2 * c.ffn_dim, c.dim};
    case TensorSlot::ffn_down:
      return {c.dim, c.ffn_dim};
    case TensorSlot::attn_sinks:
      return {c.n_heads};
    case TensorSlot::ffn_router:
      return {c.n_experts, c.dim};
    case TensorSlot::ffn_router_bias:
      return {c.n_experts};
    case TensorSlot::ffn_gate_exps:
    case TensorSlot::ffn_up_exps:
      return {c.expert_ffn_dim, c.dim};
    case TensorSlot::ffn_down_exps:
      return {c.dim, c.expert_ffn_dim};
    case TensorSlot::ffn_gate_exps_bias:
    case TensorSlot::ffn_up_exps_bias:
      return {c.expert_ffn_dim};
    case TensorSlot::ffn_down_exps_bias:
      return {c.dim};
  }
  return {};
}

TensorRole slot_role(TensorSlot s) {
  switch (s) {
    case TensorSlot::token_embd:
      return TensorRole::embedding;
    case TensorSlot::attn_q_bias:
    case TensorSlot::attn_k_bias:
    case TensorSlot::attn_v_bias:
    case TensorSlot::attn_output_bias:
    case TensorSlot::ffn_gate_bias:
    case TensorSlot::ffn_up_bias:
    case TensorSlot::ffn_down_bias:
    case TensorSlot::attn_sinks:  // f32 [n_heads], never quantized, split like q's heads
    case TensorSlot::ffn_router_bias:
    case TensorSlot::ffn_gate_exps_bias:
    case TensorSlot::ffn_up_exps_bias:
    case TensorSlot::ffn_down_exps_bias:
      return TensorRole::bias;
    case TensorSlot::ffn_router:
      return TensorRole::router;
    case TensorSlot::attn_norm:
    case TensorSlot::attn_q_norm:
    case TensorSlot::attn_k_norm:
    case TensorSlot::post_attn_norm:
    case TensorSlot::ffn_norm:
    case TensorSlot::post_ffn_norm:
    case TensorSlot::output_norm:
      return TensorRole::norm;
    default:
      return TensorRole::matmul;
  }
}

int64_t rope_permute_heads(const ModelConfig& c, TensorSlot s) {
  if (s == TensorSlot::attn_q || s == TensorSlot::attn_q_bias) return c.n_heads;
  if (s == TensorSlot::attn_k || s == TensorSlot::attn_k_bias) return c.n_kv_heads;
  return 0;
}

TensorSpec resolve(const ModelConfig& c, const TensorName& n, int64_t layer, int64_t expert = -1) {
  TensorSpec spec;
  spec.hf_name = layer < 0    ? n.hf
                 : expert < 0 ? fmt::format(fmt::runtime(n.hf), layer)
                              : fmt::format(fmt::runtime(n.hf), layer, expert);
  spec.expert = expert;
  if (n.hf_stacked && layer >= 0) {
    spec.hf_stacked = fmt::format(fmt::runtime(n.hf_stacked), layer);
    spec.stacked_rows = n.stacked_rows;
    spec.stacked_in_major = n.stacked_in_major;
  }
  spec.gguf_name = layer < 0 ? n.gguf : fmt::format(fmt::runtime(n.gguf), layer);
  spec.shape = slot_shape(c, n.slot);
  spec.role = slot_role(n.slot);
  spec.layer = layer;
  spec.slot = n.slot;
  if (n.gguf_change == GgufChange::rope_permute)
    spec.gguf_rope_permute_heads = rope_permute_heads(c, n.slot);
  if (n.gguf_change == GgufChange::plus_one) spec.gguf_offset = 1.0f;
  return spec;
}

}  // namespace

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c) {
  const ArchitectureDef& arch = architecture_def(c.arch);
  std::vector<TensorSpec> specs;
  auto globals = [&](bool before_layers) {
    for (const TensorName& n : arch.tensors)
      if (is_global(n.slot) && (n.slot == TensorSlot::token_embd) == before_layers &&
          slot_used(c, n.slot, -1))
        specs.push_back(resolve(c, n, -1));
  };
  globals(true);
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (const TensorName& n : arch.tensors)
      if (!is_global(n.slot) && slot_used(c, n.slot, l)) {
        if (!is_expert_slot(n.slot))
          specs.push_back(resolve(c, n, l));
        else
          for (int64_t e = 0; e < c.n_experts; ++e) specs.push_back(resolve(c, n, l, e));
      }
  globals(false);
  return specs;
}

bool has_slot(const ModelConfig& c, TensorSlot slot) {
  for (const TensorName& n : architecture_def(c.arch).tensors)
    if (n.slot == slot) return true;
  return false;
}

TensorSpec first_block_matmul(const ModelConfig& c) {
  for (const TensorSpec& s : model_tensor_specs(c))
    if (s.role == TensorRole::matmul && s.layer == 0) return s;
  fail("architecture {} has no matmul weight", architecture_name(c.arch));
}

bool is_expert_slot(TensorSlot s) {
  switch (s) {
    case TensorSlot::ffn_gate_exps:
    case TensorSlot::ffn_up_exps:
    case TensorSlot::ffn_down_exps:
    case TensorSlot::ffn_gate_exps_bias:
    case TensorSlot::ffn_up_exps_bias:
    case TensorSlot::ffn_down_exps_bias:
      return true;
    default:
      return false;
  }
}

std::string hf_expert_tensor_name(const ModelConfig& c, TensorSlot slot, int64_t layer,
                                  int64_t expert) {
  for (const TensorName& n : architecture_def(c.arch).tensors)
    if (n.slot == slot) return fmt::format(fmt::runtime(n.hf), layer, expert);
  fail("architecture {} has no {} tensor", architecture_name(c.arch), slot_name(slot));
}

std::string hf_tensor_name(const ModelConfig& c, TensorSlot slot, int64_t layer) {
  for (const TensorName& n : architecture_def(c.arch).tensors)
    if (n.slot == slot)
      return layer < 0 ? std::string(n.hf) : fmt::format(fmt::runtime(n.hf), layer);
  fail("architecture {} has no {} tensor", architecture_name(c.arch), slot_name(slot));
}

Tensor permute_rows_for_gguf_rope(const Tensor& w, int64_t n_heads, bool inverse) {
  const int64_t rows = w.size(0);
  if (n_heads <= 0 || rows % (2 * n_heads) != 0)
    fail("rope row permutation: {} rows do not split into {} heads of even size", rows, n_heads);
  const int64_t half = rows / n_heads / 2;
  Shape split = w.shape();
  split[0] = half;
  split.insert(split.begin(), 2);
  split.insert(split.begin(), n_heads);  // [heads, 2, half, ...]
  Tensor c = w.contiguous();
  Tensor v = inverse ? c.view([&] {  // GGUF order is [heads, half, 2, ...]
    Shape s = split;
    std::swap(s[1], s[2]);
    return s;
  }())
                     : c.view(split);
  Tensor out = v.transpose(1, 2).contiguous();
  return out.view(w.shape());
}

}  // namespace refit
