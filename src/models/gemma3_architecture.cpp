// Gemma 3 (text): sandwich norms (pre and post around attention and FFN), RMSNorm that
// multiplies by (1 + w), q/k norm, GeGLU with tanh GELU, embeddings scaled by sqrt(dim),
// tied embeddings, and local sliding-window layers interleaved 5:1 with global ones; local
// layers rotate with their own base (rope_local_base_freq) and no scaling, global ones with
// rope_theta and rope_scaling. llama.cpp's converter stores every norm weight as (1 + w).
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "models/architecture.h"
#include "models/hf_layer_windows.h"

namespace refit {
namespace {

constexpr int64_t kDefaultPattern = 6;  // every 6th layer is global

// Per-layer settings from the window, the pattern (or explicit layer kinds) and the two bases.
void set_layers(ModelConfig& c, int64_t window, const std::vector<bool>& sliding, float local_base,
                const RopeScaling& local_scaling = {}) {
  std::vector<LayerConfig> layers;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerConfig lc = c.layer(l);  // the global layer: rope_theta, rope_scaling
    if (sliding[static_cast<size_t>(l)]) {
      lc.window = window;
      lc.rope.theta = local_base;
      lc.rope.scaling = local_scaling;
    }
    layers.push_back(lc);
  }
  c.layers = std::move(layers);
}

std::vector<bool> pattern_layers(int64_t n_layers, int64_t pattern) {
  std::vector<bool> sliding(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < n_layers; ++l)
    sliding[static_cast<size_t>(l)] = pattern > 0 && (l + 1) % pattern != 0;
  return sliding;
}

void common(ModelConfig& c) {
  c.norms = NormPlacement::sandwich;
  c.qk_norm = true;
  c.activation = Activation::gelu_tanh;
  c.norm_weight_offset = 1.0f;
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
}

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  common(c);
  c.tied_embeddings = j.value("tie_word_embeddings", true);
  // transformers' Gemma 3 reads hidden_activation (hidden_act is ignored there).
  c.activation = hf_activation(j, "hidden_activation", "gelu_pytorch_tanh", source);
  if (j.contains("query_pre_attn_scalar") && j["query_pre_attn_scalar"].is_number())
    c.attention_scale = 1.0f / std::sqrt(j["query_pre_attn_scalar"].get<float>());
  const int64_t window = j.value("sliding_window", int64_t{4096});
  std::vector<bool> sliding = hf_sliding_layer_types(j, c.n_layers, source);
  if (sliding.empty())
    sliding = pattern_layers(c.n_layers, j.value("sliding_window_pattern", kDefaultPattern));
  // v5 rope_parameters.sliding_attention replaces rope_local_base_freq (and may scale).
  if (c.sliding_rope_given)
    set_layers(c, window, sliding, c.sliding_rope_theta, c.sliding_rope_scaling);
  else
    set_layers(c, window, sliding, j.value("rope_local_base_freq", 10000.0f));
}

void configure_gguf(const GgufMetadata& m, ModelConfig& c) {
  common(c);
  // llama.cpp scales queries by 1/sqrt(head_dim), except for the 27B model (62 layers),
  // whose query_pre_attn_scalar is dim / heads.
  if (c.n_layers == 62) c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.dim / c.n_heads));
  const int64_t window = m.get_u32("gemma3.attention.sliding_window").value_or(4096);
  const int64_t pattern =
      m.get_u32("gemma3.attention.sliding_window_pattern").value_or(kDefaultPattern);
  set_layers(c, window, pattern_layers(c.n_layers, pattern), 10000.0f);
}

std::vector<TensorName> tensors() {
  const GgufChange p1 = GgufChange::plus_one;
  return {
      {TensorSlot::token_embd, "model.embed_tokens.weight", "token_embd.weight"},
      {TensorSlot::attn_norm, "model.layers.{}.input_layernorm.weight", "blk.{}.attn_norm.weight",
       p1},
      {TensorSlot::attn_q, "model.layers.{}.self_attn.q_proj.weight", "blk.{}.attn_q.weight"},
      {TensorSlot::attn_k, "model.layers.{}.self_attn.k_proj.weight", "blk.{}.attn_k.weight"},
      {TensorSlot::attn_v, "model.layers.{}.self_attn.v_proj.weight", "blk.{}.attn_v.weight"},
      {TensorSlot::attn_q_norm, "model.layers.{}.self_attn.q_norm.weight",
       "blk.{}.attn_q_norm.weight", p1},
      {TensorSlot::attn_k_norm, "model.layers.{}.self_attn.k_norm.weight",
       "blk.{}.attn_k_norm.weight", p1},
      {TensorSlot::attn_output, "model.layers.{}.self_attn.o_proj.weight",
       "blk.{}.attn_output.weight"},
      {TensorSlot::post_attn_norm, "model.layers.{}.post_attention_layernorm.weight",
       "blk.{}.post_attention_norm.weight", p1},
      {TensorSlot::ffn_norm, "model.layers.{}.pre_feedforward_layernorm.weight",
       "blk.{}.ffn_norm.weight", p1},
      {TensorSlot::ffn_gate, "model.layers.{}.mlp.gate_proj.weight", "blk.{}.ffn_gate.weight"},
      {TensorSlot::ffn_up, "model.layers.{}.mlp.up_proj.weight", "blk.{}.ffn_up.weight"},
      {TensorSlot::ffn_down, "model.layers.{}.mlp.down_proj.weight", "blk.{}.ffn_down.weight"},
      {TensorSlot::post_ffn_norm, "model.layers.{}.post_feedforward_layernorm.weight",
       "blk.{}.post_ffw_norm.weight", p1},
      {TensorSlot::output_norm, "model.norm.weight", "output_norm.weight", p1},
      {TensorSlot::output, "lm_head.weight", "output.weight"},
  };
}

}  // namespace

const ArchitectureDef& gemma3_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::gemma3,
      .name = "gemma3",
      .hf_names = {"Gemma3ForCausalLM", "gemma3_text"},
      .tensors = tensors(),
      .hf_fields = {"hidden_activation", "query_pre_attn_scalar", "sliding_window",
                    "sliding_window_pattern", "_sliding_window_pattern", "layer_types",
                    "rope_local_base_freq"},
      .per_layer_rope = true,
      .configure_hf = configure_hf,
      .configure_gguf = configure_gguf,
  };
  return def;
}

}  // namespace refit
