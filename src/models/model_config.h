// Hyper-parameters of a Llama-family model. The architectures refit runs (Llama 1/2/3,
// Mistral, Qwen2, Qwen3, llama2.c) differ only in the fields below; the forward pass
// reads them as data instead of branching per architecture name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace refit {

class GgufMetadata;

enum class Architecture : uint8_t { llama, mistral, qwen2, qwen3 };
const char* architecture_name(Architecture a);
Architecture architecture_from_name(const std::string& name);  // throws naming the name

// Llama-3 style frequency-dependent rope scaling (HF rope_scaling.rope_type == "llama3").
struct RopeScaling {
  bool enabled = false;
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position = 8192;
};

struct ModelConfig {
  Architecture arch = Architecture::llama;
  int64_t dim = 0;         // hidden size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // grouped-query attention when < n_heads
  int64_t head_dim = 0;    // usually dim / n_heads (Qwen3 may differ)
  int64_t ffn_dim = 0;     // intermediate size
  int64_t vocab_size = 0;
  int64_t max_seq_len = 2048;  // context length
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int64_t rope_dim = 0;  // rotated dims per head; 0 means head_dim
  ops::RopeStyle rope_style = ops::RopeStyle::neox;
  RopeScaling rope_scaling;
  std::vector<float> rope_freq_factors;  // GGUF rope_freqs.weight: divides each frequency
  bool qkv_bias = false;  // Qwen2
  bool qk_norm = false;   // Qwen3: RMSNorm over each head of q and k before rope
  bool tied_embeddings = false;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  DType weight_dtype = DType::f32;  // dtype of the checkpoint's matmul weights (informational)

  int64_t rotary_dim() const { return rope_dim > 0 ? rope_dim : head_dim; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // Throws naming the first inconsistent field (zero sizes, heads not dividing, ...).
  void validate(const std::string& source) const;
  int64_t n_params() const;  // matmul + embedding + norm parameters
};

// From a Hugging Face config.json (text). `source` names the file in errors.
ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source);
// From GGUF metadata ("llama.*", "qwen2.*", "qwen3.*" keys).
ModelConfig config_from_gguf(const GgufMetadata& metadata);

}  // namespace refit
