// An architecture as data: its names (Hugging Face model_type / class, GGUF
// general.architecture), its tensor table, and how its config fields map onto
// ModelConfig. Each architecture is one file (models/<name>_architecture.cpp) defining
// one ArchitectureDef; architectures.cpp lists them.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "models/tensor_table.h"

namespace refit {

struct ArchitectureDef {
  Architecture id;
  const char* name;                   // "llama": GGUF general.architecture and refit's name
  std::vector<std::string> hf_names;  // HF "architectures"[0] classes and model_type values
  std::vector<TensorName> tensors;    // checkpoint order
  // The config.json fields configure_hf reads beyond the common ones (config_fields.h):
  // honoured here even where the shared table refuses them.
  std::vector<std::string> hf_fields;
  // Whether sliding and full-attention layers may rotate differently (transformers v5
  // per-layer-type rope_parameters; Gemma 3's local base).
  bool per_layer_rope = false;
  // After the common fields are read: the architecture's own. `c` has the common ones.
  void (*configure_hf)(const nlohmann::json& config, ModelConfig& c,
                       const std::string& source) = nullptr;
  void (*configure_gguf)(const GgufMetadata& metadata, ModelConfig& c) = nullptr;
};

const ArchitectureDef& architecture_def(Architecture a);
// By GGUF name, HF class or model_type; throws naming the name and every supported one.
const ArchitectureDef& find_architecture(const std::string& name);
std::vector<const ArchitectureDef*> all_architectures();

// The architectures, one file each.
const ArchitectureDef& llama_architecture();
const ArchitectureDef& mistral_architecture();
const ArchitectureDef& qwen2_architecture();
const ArchitectureDef& qwen3_architecture();
const ArchitectureDef& gemma3_architecture();
const ArchitectureDef& phi3_architecture();
const ArchitectureDef& qwen3moe_architecture();
const ArchitectureDef& gpt_oss_architecture();

// The Llama naming that most architectures share (Mistral, Qwen2, Qwen3 reuse it).
std::vector<TensorName> llama_tensor_names(bool gguf_rope_permute);

// Shared by the hooks. The activation named by `key` (HF's ACT2FN names: silu/swish, gelu,
// gelu_pytorch_tanh/gelu_new/gelu_fast), `fallback` when absent; any other name throws
// naming `source` and the field.
Activation hf_activation(const nlohmann::json& config, const char* key, const char* fallback,
                         const std::string& source);
// An integer field of a config.json, `fallback` when absent or null; throws naming `source`
// and the field when it is not an integer.
int64_t hf_int_field(const nlohmann::json& config, const char* key, int64_t fallback,
                     const std::string& source);
// Marks the mixture-of-experts layers (`sparse`, one per layer), filling `layers` from the
// model-wide defaults when it is empty, so set them (rope, windows) first.
void set_moe_layers(ModelConfig& c, const std::vector<bool>& sparse);
// attention_bias (Llama, Mistral, Qwen3): biases on q, k, v and o_proj, as transformers.
void read_hf_attention_bias(const nlohmann::json& config, ModelConfig& c,
                            const std::string& source);

}  // namespace refit
