// gpt-oss (GptOssForCausalLM, llama.cpp gpt-oss / LLM_ARCH_OPENAI_MOE): attention with q, k,
// v and o biases and a learned sink logit per head (it joins the softmax denominator only),
// sliding-window layers alternating with full ones, NeoX rope with YaRN; every layer a
// mixture of experts: a biased router, the top k of its logits, softmax over those k; each
// expert the clamped SwiGLU (swiglu_oai) with per-expert gate, up and down biases.
//
// Hugging Face's config says which layers slide (`layer_types`, window `sliding_window`) and
// that YaRN's correction range is not rounded (`truncate: false`, read by hf_rope_config);
// a GGUF has the window and llama.cpp's layer pattern (every other layer, the even ones,
// slide) and llama.cpp's rounded YaRN (gguf_rope_config.h), which is what its logits are.
//
// Experts are parameters with one sub-shard per expert and projection, under per-expert
// names (`model.layers.L.mlp.experts.E.gate_proj.weight`, as Megatron exports them); GGUF
// stacks them in one 3-D tensor per projection, gate and up apart; Hugging Face stacks
// them too, gate and up interleaved in one tensor stored [E, dim, 2I] (or as MXFP4
// `_blocks` / `_scales`), read as views through the table's hf_stacked forms
// (models/stacked_experts.h).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "models/architecture.h"
#include "models/gguf_rope_config.h"
#include "models/hf_layer_windows.h"

namespace refit {
namespace {

// What every gpt-oss computes, whichever format described it.
void set_gpt_oss(ModelConfig& c) {
  c.qkv_bias = true;
  c.o_bias = true;
  c.attention_sinks = true;
  c.router_scoring = ops::RouterScoring::topk_softmax;
  c.router_renormalize = false;
  c.router_bias = true;
  c.expert_bias = true;
  c.expert_activation = ExpertActivation::swiglu_oai;
  c.swiglu_alpha = 1.702f;
  c.ffn_dim = c.expert_ffn_dim;  // no dense FFN: the expert width
}

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  c.n_experts = hf_int_field(j, "num_local_experts", 0, source);
  c.n_experts_used = hf_int_field(j, "num_experts_per_tok",
                                  hf_int_field(j, "experts_per_token", 0, source), source);
  c.expert_ffn_dim = c.ffn_dim;  // intermediate_size is the expert width
  if (j.contains("attention_bias") && j["attention_bias"].is_boolean() &&
      !j["attention_bias"].get<bool>())
    throw FormatError(
        fmt::format("{}: gpt-oss without attention biases is not a model refit "
                    "knows (attention_bias false)",
                    source));
  set_gpt_oss(c);
  if (j.contains("swiglu_limit") && !j["swiglu_limit"].is_null()) {
    if (!j["swiglu_limit"].is_number())
      throw FormatError(fmt::format("{}: 'swiglu_limit' must be a number", source));
    c.swiglu_limit = j["swiglu_limit"].get<float>();
  }
  set_hf_layer_windows(j, c, source, WindowRule::every_layer);  // layer_types first
  set_moe_layers(c, std::vector<bool>(static_cast<size_t>(c.n_layers), true));
}

void configure_gguf(const GgufMetadata& m, ModelConfig& c) {
  const std::string a = "gpt-oss.";
  c.n_experts = m.require_u32(a + "expert_count");
  c.n_experts_used = m.require_u32(a + "expert_used_count");
  c.expert_ffn_dim = m.require_u32(a + "expert_feed_forward_length");
  set_gpt_oss(c);
  const int64_t window = m.get_u32(a + "attention.sliding_window").value_or(0);
  const int64_t pattern = m.get_u32(a + "attention.sliding_window_pattern").value_or(2);
  if (window > 0) set_sliding_layers(c, window, llamacpp_swa_pattern_layers(c.n_layers, pattern));
  set_moe_layers(c, std::vector<bool>(static_cast<size_t>(c.n_layers), true));
}

std::vector<TensorName> tensor_names() {
  std::vector<TensorName> t = llama_tensor_names(/*gguf_rope_permute=*/false);
  for (TensorName& n : t)  // llama.cpp names the pre-FFN norm after HF's
    if (n.slot == TensorSlot::ffn_norm) n.gguf = "blk.{}.post_attention_norm.weight";
  auto before = [&](TensorSlot slot) {
    auto at = t.begin();
    while (at != t.end() && at->slot != slot) ++at;
    return at;
  };
  t.insert(before(TensorSlot::ffn_norm),
           {TensorSlot::attn_sinks, "model.layers.{}.self_attn.sinks", "blk.{}.attn_sinks.weight"});
  // Hugging Face stacks each layer's experts (transformers' GptOssExperts): gate and up
  // interleaved in one tensor stored for x @ W, and its MXFP4 form beside it.
  const char* gate_up = "model.layers.{}.mlp.experts.gate_up_proj";
  const char* gate_up_bias = "model.layers.{}.mlp.experts.gate_up_proj_bias";
  const char* down = "model.layers.{}.mlp.experts.down_proj";
  const char* down_bias = "model.layers.{}.mlp.experts.down_proj_bias";
  const GgufChange none = GgufChange::none;
  const std::vector<TensorName> moe = {
      {TensorSlot::ffn_router, "model.layers.{}.mlp.router.weight", "blk.{}.ffn_gate_inp.weight"},
      {TensorSlot::ffn_router_bias, "model.layers.{}.mlp.router.bias", "blk.{}.ffn_gate_inp.bias"},
      {TensorSlot::ffn_gate_exps, "model.layers.{}.mlp.experts.{}.gate_proj.weight",
       "blk.{}.ffn_gate_exps.weight", none, gate_up, StackedRows::even, true},
      {TensorSlot::ffn_gate_exps_bias, "model.layers.{}.mlp.experts.{}.gate_proj.bias",
       "blk.{}.ffn_gate_exps.bias", none, gate_up_bias, StackedRows::even},
      {TensorSlot::ffn_up_exps, "model.layers.{}.mlp.experts.{}.up_proj.weight",
       "blk.{}.ffn_up_exps.weight", none, gate_up, StackedRows::odd, true},
      {TensorSlot::ffn_up_exps_bias, "model.layers.{}.mlp.experts.{}.up_proj.bias",
       "blk.{}.ffn_up_exps.bias", none, gate_up_bias, StackedRows::odd},
      {TensorSlot::ffn_down_exps, "model.layers.{}.mlp.experts.{}.down_proj.weight",
       "blk.{}.ffn_down_exps.weight", none, down, StackedRows::all, true},
      {TensorSlot::ffn_down_exps_bias, "model.layers.{}.mlp.experts.{}.down_proj.bias",
       "blk.{}.ffn_down_exps.bias", none, down_bias},
  };
  t.insert(before(TensorSlot::output_norm), moe.begin(), moe.end());
  return t;
}

}  // namespace

const ArchitectureDef& gpt_oss_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::gpt_oss,
      .name = "gpt-oss",
      .hf_names = {"GptOssForCausalLM", "gpt_oss"},
      .tensors = tensor_names(),
      .hf_fields = {"attention_bias", "sliding_window", "layer_types", "num_local_experts",
                    "num_experts_per_tok", "experts_per_token", "swiglu_limit",
                    // the trained context YaRN extends (rope_scaling carries it too)
                    "initial_context_length",
                    // training only: the router's auxiliary loss
                    "output_router_logits", "router_aux_loss_coef"},
      .configure_hf = configure_hf,
      .configure_gguf = configure_gguf,
  };
  return def;
}

}  // namespace refit
