// Hyper-parameters of a decoder-only transformer: the model-wide sizes, and per layer
// the settings that differ between architectures (attention window, rope, norm
// placement, FFN kind, activation). The forward pass reads them as data; it never
// branches on an architecture's name. Each architecture (models/*_architecture.cpp)
// fills them from a Hugging Face config.json or GGUF metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "layers/feed_forward.h"
#include "layers/moe_feed_forward.h"
#include "layers/rotary.h"

namespace refit {

class GgufMetadata;

enum class Architecture : uint8_t { llama, mistral, qwen2, qwen3, gemma3, phi3, qwen3moe, gpt_oss };
const char* architecture_name(Architecture a);

// Where a block normalises around its attention and its FFN.
enum class NormPlacement : uint8_t {
  pre,       // x += f(norm(x))                    (Llama)
  sandwich,  // x += post_norm(f(norm(x)))         (Gemma 2/3: both)
};
// dense: one gated MLP of ffn_dim; moe: a router over n_experts experts of expert_ffn_dim
// (layers/moe_feed_forward.h), the ModelConfig's expert fields.
enum class FfnKind : uint8_t { dense, moe };
const char* activation_name(Activation a);  // Activation: layers/feed_forward.h

// What one layer computes; sizes are model-wide.
struct LayerConfig {
  int64_t window =
      0;  // sliding-window attention over this many positions (itself included); 0: full
  RopeConfig rope;
  NormPlacement norms = NormPlacement::pre;
  bool qk_norm = false;  // RMSNorm over each head of q and k before rope (Qwen3, Gemma 3)
  FfnKind ffn = FfnKind::dense;
  Activation activation = Activation::silu;
  bool operator==(const LayerConfig&) const = default;
};

struct ModelConfig {
  Architecture arch = Architecture::llama;
  int64_t dim = 0;  // hidden size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // grouped-query attention when < n_heads
  int64_t head_dim = 0;    // usually dim / n_heads (Qwen3, Gemma 3 may differ)
  int64_t ffn_dim = 0;     // intermediate size
  int64_t vocab_size = 0;
  int64_t max_seq_len = 2048;  // context length
  float rms_eps = 1e-5f;
  // Model-wide defaults of the per-layer settings: every layer uses them unless
  // `layers` is given (an architecture with layers that differ fills it).
  float rope_theta = 10000.0f;
  int64_t rope_dim = 0;  // rotated dims per head; 0 means head_dim
  ops::RopeStyle rope_style = ops::RopeStyle::neox;
  RopeScaling rope_scaling;
  std::vector<float> rope_freq_factors;  // GGUF rope_freqs.weight: divides each frequency
  bool qk_norm = false;                  // Qwen3
  int64_t sliding_window = 0;            // Mistral's sliding_window on every layer; 0: none
  Activation activation = Activation::silu;
  NormPlacement norms = NormPlacement::pre;
  std::vector<LayerConfig> layers;  // empty, or one per layer

  // Mixture of experts, on the layers whose LayerConfig::ffn is moe.
  int64_t n_experts = 0;       // E (num_experts, GGUF expert_count)
  int64_t n_experts_used = 0;  // k per token (num_experts_per_tok, expert_used_count)
  int64_t expert_ffn_dim = 0;  // each expert's intermediate size (moe_intermediate_size)
  ops::RouterScoring router_scoring = ops::RouterScoring::softmax_topk;
  bool router_renormalize = false;  // softmax_topk: the k weights divided by their sum
  bool router_bias = false;         // a bias on the router logits (gpt-oss)
  bool expert_bias = false;         // biases on every expert's gate, up and down (gpt-oss)
  ExpertActivation expert_activation = ExpertActivation::silu;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;  // swiglu_oai's constants

  bool qkv_bias = false;  // biases on q, k and v (Qwen2; attention_bias)
  bool o_bias = false;    // a bias on o_proj (attention_bias in Llama, Mistral, Qwen3)
  bool mlp_bias = false;  // biases on gate, up and down (Llama's mlp_bias)
  // A learned sink logit per attention head joining the softmax's denominator (gpt-oss:
  // TensorSlot::attn_sinks, ops::attention's sinks).
  bool attention_sinks = false;
  bool tied_embeddings = false;
  float embedding_scale = 1.0f;     // Gemma: token embeddings times sqrt(dim)
  float norm_weight_offset = 0.0f;  // Gemma: RMSNorm multiplies by (1 + w)
  float attention_scale = 0.0f;     // softmax scale; 0 means 1/sqrt(head_dim)
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  DType weight_dtype = DType::f32;  // dtype of the checkpoint's matmul weights (informational)
  // transformers v5 per-layer-type rope_parameters: the "sliding_attention" layers' rope when
  // it differs from the model-wide (full-attention) one; the architecture that assigns the
  // windows applies it (Gemma 3).
  bool sliding_rope_given = false;
  float sliding_rope_theta = 10000.0f;
  RopeScaling sliding_rope_scaling;
  // config.json fields in none of refit's tables (models/config_fields.h): ignored, and
  // said so in a warning at load and by `refit inspect`, never silently.
  std::vector<std::string> unrecognised_fields;

  int64_t rotary_dim() const { return rope_dim > 0 ? rope_dim : head_dim; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  float softmax_scale() const;
  // Layer l's settings: layers[l], or the model-wide defaults.
  LayerConfig layer(int64_t l) const;
  // The longest window any layer has (0 when some layer attends to everything).
  int64_t max_window() const;
  // Throws naming the first inconsistent field (zero sizes, heads not dividing, ...).
  void validate(const std::string& source) const;
  int64_t n_params() const;  // every tensor of the architecture's table
  bool has_moe() const;      // some layer's FFN is a mixture of experts
};

// From a Hugging Face config.json (text). `source` names the file in errors.
ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source);
// From GGUF metadata ("<arch>.*" keys).
ModelConfig config_from_gguf(const GgufMetadata& metadata);

}  // namespace refit
