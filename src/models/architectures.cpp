// The list of architectures refit runs; each is defined in its own file.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/architecture.h"

namespace refit {

std::vector<const ArchitectureDef*> all_architectures() {
  return {&llama_architecture(),    &mistral_architecture(), &qwen2_architecture(),
          &qwen3_architecture(),    &gemma3_architecture(),  &phi3_architecture(),
          &qwen3moe_architecture(), &gpt_oss_architecture()};
}

const ArchitectureDef& architecture_def(Architecture a) {
  for (const ArchitectureDef* def : all_architectures())
    if (def->id == a) return *def;
  fail("architecture {} has no definition", static_cast<int>(a));
}

const ArchitectureDef& find_architecture(const std::string& name) {
  std::string known;
  for (const ArchitectureDef* def : all_architectures()) {
    if (name == def->name) return *def;
    for (const std::string& n : def->hf_names)
      if (name == n) return *def;
    known += known.empty() ? def->name : fmt::format(", {}", def->name);
  }
  fail("unsupported architecture '{}' (refit runs {})", name, known);
}

int64_t hf_int_field(const nlohmann::json& j, const char* key, int64_t fallback,
                     const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer())
    throw FormatError(
        fmt::format("{}: '{}' must be an integer, got {}", source, key, j[key].dump()));
  return j[key].get<int64_t>();
}

void set_moe_layers(ModelConfig& c, const std::vector<bool>& sparse) {
  if (c.layers.empty()) {
    std::vector<LayerConfig> layers;
    for (int64_t l = 0; l < c.n_layers; ++l) layers.push_back(c.layer(l));
    c.layers = std::move(layers);
  }
  for (int64_t l = 0; l < c.n_layers; ++l)
    c.layers[static_cast<size_t>(l)].ffn =
        sparse[static_cast<size_t>(l)] ? FfnKind::moe : FfnKind::dense;
}

std::vector<TensorName> llama_tensor_names(bool permute) {
  const GgufChange rope = permute ? GgufChange::rope_permute : GgufChange::none;
  return {
      {TensorSlot::token_embd, "model.embed_tokens.weight", "token_embd.weight"},
      {TensorSlot::attn_norm, "model.layers.{}.input_layernorm.weight", "blk.{}.attn_norm.weight"},
      {TensorSlot::attn_q, "model.layers.{}.self_attn.q_proj.weight", "blk.{}.attn_q.weight", rope},
      {TensorSlot::attn_k, "model.layers.{}.self_attn.k_proj.weight", "blk.{}.attn_k.weight", rope},
      {TensorSlot::attn_v, "model.layers.{}.self_attn.v_proj.weight", "blk.{}.attn_v.weight"},
      {TensorSlot::attn_q_bias, "model.layers.{}.self_attn.q_proj.bias", "blk.{}.attn_q.bias",
       rope},
      {TensorSlot::attn_k_bias, "model.layers.{}.self_attn.k_proj.bias", "blk.{}.attn_k.bias",
       rope},
      {TensorSlot::attn_v_bias, "model.layers.{}.self_attn.v_proj.bias", "blk.{}.attn_v.bias"},
      {TensorSlot::attn_q_norm, "model.layers.{}.self_attn.q_norm.weight",
       "blk.{}.attn_q_norm.weight"},
      {TensorSlot::attn_k_norm, "model.layers.{}.self_attn.k_norm.weight",
       "blk.{}.attn_k_norm.weight"},
      {TensorSlot::attn_output, "model.layers.{}.self_attn.o_proj.weight",
       "blk.{}.attn_output.weight"},
      {TensorSlot::attn_output_bias, "model.layers.{}.self_attn.o_proj.bias",
       "blk.{}.attn_output.bias"},
      {TensorSlot::ffn_norm, "model.layers.{}.post_attention_layernorm.weight",
       "blk.{}.ffn_norm.weight"},
      {TensorSlot::ffn_gate, "model.layers.{}.mlp.gate_proj.weight", "blk.{}.ffn_gate.weight"},
      {TensorSlot::ffn_up, "model.layers.{}.mlp.up_proj.weight", "blk.{}.ffn_up.weight"},
      {TensorSlot::ffn_down, "model.layers.{}.mlp.down_proj.weight", "blk.{}.ffn_down.weight"},
      {TensorSlot::ffn_gate_bias, "model.layers.{}.mlp.gate_proj.bias", "blk.{}.ffn_gate.bias"},
      {TensorSlot::ffn_up_bias, "model.layers.{}.mlp.up_proj.bias", "blk.{}.ffn_up.bias"},
      {TensorSlot::ffn_down_bias, "model.layers.{}.mlp.down_proj.bias", "blk.{}.ffn_down.bias"},
      {TensorSlot::output_norm, "model.norm.weight", "output_norm.weight"},
      {TensorSlot::output, "lm_head.weight", "output.weight"},
  };
}

}  // namespace refit
