// Qwen3-MoE (Qwen3MoeForCausalLM, llama.cpp qwen3moe): Qwen3's attention (q/k norm, no
// biases) and, on its sparse layers, a mixture of experts: softmax over all experts, the
// top k, renormalised when norm_topk_prob; each expert silu(gate) * up, then down. Layer l
// is sparse iff l is not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0; the
// others are a dense Qwen3 MLP of intermediate_size. llama.cpp has no sparse-step key:
// every layer of a GGUF is sparse, always renormalised.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "models/architecture.h"
#include "models/hf_layer_windows.h"

namespace refit {
namespace {

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  c.qk_norm = true;
  read_hf_attention_bias(j, c, source);
  set_hf_layer_windows(j, c, source, WindowRule::from_max_window_layers);
  c.n_experts = hf_int_field(j, "num_experts", 0, source);
  c.n_experts_used = hf_int_field(j, "num_experts_per_tok", 0, source);
  c.expert_ffn_dim = hf_int_field(j, "moe_intermediate_size", 0, source);
  c.router_scoring = ops::RouterScoring::softmax_topk;
  if (j.contains("norm_topk_prob") && !j["norm_topk_prob"].is_null()) {
    if (!j["norm_topk_prob"].is_boolean())
      throw FormatError(fmt::format("{}: 'norm_topk_prob' must be true or false", source));
    c.router_renormalize = j["norm_topk_prob"].get<bool>();
  } else {
    c.router_renormalize = false;  // transformers' Qwen3MoeConfig default
  }
  const int64_t step = hf_int_field(j, "decoder_sparse_step", 1, source);
  if (step < 1)
    throw FormatError(fmt::format("{}: decoder_sparse_step must be >= 1, got {}", source, step));
  std::vector<bool> sparse(static_cast<size_t>(c.n_layers), false);
  for (int64_t l = 0; l < c.n_layers; ++l)
    sparse[static_cast<size_t>(l)] = c.n_experts > 0 && (l + 1) % step == 0;
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    if (!j["mlp_only_layers"].is_array())
      throw FormatError(
          fmt::format("{}: 'mlp_only_layers' must be a list of layer indices", source));
    for (const auto& v : j["mlp_only_layers"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.n_layers)
        throw FormatError(fmt::format("{}: mlp_only_layers entry {} is not a layer of {}", source,
                                      v.dump(), c.n_layers));
      sparse[static_cast<size_t>(v.get<int64_t>())] = false;
    }
  }
  set_moe_layers(c, sparse);
}

void configure_gguf(const GgufMetadata& m, ModelConfig& c) {
  c.qk_norm = true;
  const std::string a = "qwen3moe.";
  c.n_experts = m.require_u32(a + "expert_count");
  c.n_experts_used = m.require_u32(a + "expert_used_count");
  c.expert_ffn_dim = m.require_u32(a + "expert_feed_forward_length");
  c.router_scoring = ops::RouterScoring::softmax_topk;
  c.router_renormalize = true;  // llama.cpp's qwen3moe graph always renormalises
  set_moe_layers(c, std::vector<bool>(static_cast<size_t>(c.n_layers), true));
}

std::vector<TensorName> tensor_names() {
  std::vector<TensorName> t = llama_tensor_names(/*gguf_rope_permute=*/false);
  const std::vector<TensorName> moe = {
      {TensorSlot::ffn_router, "model.layers.{}.mlp.gate.weight", "blk.{}.ffn_gate_inp.weight"},
      {TensorSlot::ffn_gate_exps, "model.layers.{}.mlp.experts.{}.gate_proj.weight",
       "blk.{}.ffn_gate_exps.weight"},
      {TensorSlot::ffn_up_exps, "model.layers.{}.mlp.experts.{}.up_proj.weight",
       "blk.{}.ffn_up_exps.weight"},
      {TensorSlot::ffn_down_exps, "model.layers.{}.mlp.experts.{}.down_proj.weight",
       "blk.{}.ffn_down_exps.weight"},
  };
  // After the dense MLP rows (a layer has one or the other), before the final norm.
  auto at = t.begin();
  while (at != t.end() && at->slot != TensorSlot::output_norm) ++at;
  t.insert(at, moe.begin(), moe.end());
  return t;
}

}  // namespace

const ArchitectureDef& qwen3moe_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::qwen3moe,
      .name = "qwen3moe",
      .hf_names = {"Qwen3MoeForCausalLM", "qwen3_moe"},
      .tensors = tensor_names(),
      .hf_fields = {"attention_bias", "use_sliding_window", "sliding_window", "max_window_layers",
                    "layer_types", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                    "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
                    // training only: the router's auxiliary loss
                    "output_router_logits", "router_aux_loss_coef"},
      .configure_hf = configure_hf,
      .configure_gguf = configure_gguf,
  };
  return def;
}

}  // namespace refit
