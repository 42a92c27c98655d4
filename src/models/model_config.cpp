#include "models/model_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/json_depth.h"
#include "models/architecture.h"
#include "models/config_fields.h"
#include "models/gguf_rope_config.h"
#include "models/hf_rope_config.h"
#include "models/tensor_table.h"

namespace refit {

const char* architecture_name(Architecture a) { return architecture_def(a).name; }

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::silu:
      return "silu";
    case Activation::gelu_tanh:
      return "gelu_pytorch_tanh";
    case Activation::gelu_erf:
      return "gelu";
  }
  return "?";
}

float ModelConfig::softmax_scale() const {
  return attention_scale > 0 ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

LayerConfig ModelConfig::layer(int64_t l) const {
  if (!layers.empty()) return layers.at(static_cast<size_t>(l));
  LayerConfig lc;
  lc.window = sliding_window;
  lc.rope.style = rope_style;
  lc.rope.theta = rope_theta;
  lc.rope.dim = rotary_dim();
  lc.rope.scaling = rope_scaling;
  lc.rope.freq_factors = rope_freq_factors;
  lc.norms = norms;
  lc.qk_norm = qk_norm;
  lc.activation = activation;
  return lc;
}

int64_t ModelConfig::max_window() const {
  int64_t w = 0;
  for (int64_t l = 0; l < n_layers; ++l) {
    const int64_t lw = layer(l).window;
    if (lw <= 0) return 0;
    w = std::max(w, lw);
  }
  return w;
}

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0) fail("{}: {} must be positive, got {}", source, name, v);
  };
  positive(dim, "hidden size");
  positive(n_layers, "number of layers");
  positive(n_heads, "number of attention heads");
  positive(n_kv_heads, "number of key/value heads");
  positive(head_dim, "head dimension");
  positive(ffn_dim, "intermediate size");
  positive(vocab_size, "vocabulary size");
  positive(max_seq_len, "context length");
  if (n_heads % n_kv_heads != 0)
    fail("{}: {} attention heads are not a multiple of {} key/value heads", source, n_heads,
         n_kv_heads);
  if (!layers.empty() && static_cast<int64_t>(layers.size()) != n_layers)
    fail("{}: {} per-layer settings for {} layers", source, layers.size(), n_layers);
  if (!(rms_eps > 0)) fail("{}: rms_norm_eps must be positive", source);
  for (int64_t l = 0; l < n_layers; ++l) {
    const LayerConfig lc = layer(l);
    const RopeConfig& r = lc.rope;
    if (r.dim > head_dim || r.dim <= 0 || r.dim % 2 != 0)
      fail("{}: rotary dimension {} must be even, positive and at most the head dimension {}",
           source, r.dim, head_dim);
    if (!r.freq_factors.empty() && static_cast<int64_t>(r.freq_factors.size()) != r.dim / 2)
      fail("{}: rope_freqs has {} entries, expected {}", source, r.freq_factors.size(), r.dim / 2);
    if (r.scaling.kind == RopeScalingKind::longrope &&
        (static_cast<int64_t>(r.scaling.short_factors.size()) != r.dim / 2 ||
         static_cast<int64_t>(r.scaling.long_factors.size()) != r.dim / 2))
      fail("{}: longrope has {} short and {} long factors, expected {} each (rotary dimension / 2)",
           source, r.scaling.short_factors.size(), r.scaling.long_factors.size(), r.dim / 2);
    if ((r.scaling.kind == RopeScalingKind::linear || r.scaling.kind == RopeScalingKind::llama3 ||
         r.scaling.kind == RopeScalingKind::yarn) &&
        !(r.scaling.factor > 0))
      fail("{}: rope_scaling factor must be positive", source);
    if (r.scaling.kind == RopeScalingKind::dynamic && !(r.scaling.factor >= 1))
      fail("{}: dynamic rope_scaling factor must be at least 1, got {}", source, r.scaling.factor);
    if (r.scaling.kind == RopeScalingKind::dynamic && r.dim <= 2)
      fail("{}: dynamic rope scaling needs more than 2 rotary dimensions", source);
    if (!(r.theta > 0)) fail("{}: rope_theta must be positive", source);
    if (lc.window < 0) fail("{}: layer {} has a negative sliding window {}", source, l, lc.window);
  }
  if (has_moe() &&
      (n_experts <= 0 || n_experts_used <= 0 || n_experts_used > n_experts || expert_ffn_dim <= 0))
    fail(
        "{}: a mixture of experts needs num_experts > 0, 1 <= num_experts_per_tok <= num_experts "
        "and moe_intermediate_size > 0, got {}, {} and {}",
        source, n_experts, n_experts_used, expert_ffn_dim);
}

bool ModelConfig::has_moe() const {
  for (int64_t l = 0; l < n_layers; ++l)
    if (layer(l).ffn == FfnKind::moe) return true;
  return false;
}

int64_t ModelConfig::n_params() const {
  int64_t total = 0;
  for (const TensorSpec& s : model_tensor_specs(*this)) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    total += n;
  }
  return total;
}

namespace {

struct ActivationName {
  const char* name;
  Activation activation;
};

// transformers' ACT2FN names refit runs. gelu_new and gelu_fast are the tanh formula
// written out (NewGELUActivation, FastGELUActivation): the same function.
constexpr ActivationName kActivations[] = {
    {"silu", Activation::silu},
    {"swish", Activation::silu},
    {"gelu", Activation::gelu_erf},
    {"gelu_python", Activation::gelu_erf},
    {"gelu_pytorch_tanh", Activation::gelu_tanh},
    {"gelu_new", Activation::gelu_tanh},
    {"gelu_fast", Activation::gelu_tanh},
    {"gelu_tanh", Activation::gelu_tanh},
};

}  // namespace

Activation hf_activation(const nlohmann::json& j, const char* key, const char* fallback,
                         const std::string& source) {
  std::string name = fallback;
  if (j.contains(key) && !j[key].is_null()) {
    if (!j[key].is_string()) throw FormatError(fmt::format("{}: {} must be a string", source, key));
    name = j[key].get<std::string>();
  }
  std::string known;
  for (const ActivationName& a : kActivations) {
    if (name == a.name) return a.activation;
    known += known.empty() ? a.name : fmt::format(", {}", a.name);
  }
  throw FormatError(
      fmt::format("{}: {} '{}' is not supported (refit runs {})", source, key, name, known));
}

void read_hf_attention_bias(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  if (!j.contains("attention_bias") || j["attention_bias"].is_null()) return;
  if (!j["attention_bias"].is_boolean())
    throw FormatError(fmt::format("{}: attention_bias must be true or false", source));
  c.qkv_bias = c.o_bias = j["attention_bias"].get<bool>();
}

ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source) {
  nlohmann::json j;
  try {
    j = parse_json_limited(json_text.data(), json_text.data() + json_text.size(), source);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: invalid JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw FormatError(fmt::format("{}: expected a JSON object", source));
  // Multimodal wrappers (Gemma3ForConditionalGeneration) keep the text model's fields here.
  if (j.contains("text_config") && j["text_config"].is_object()) {
    nlohmann::json text = j["text_config"];
    for (const char* k : {"architectures", "torch_dtype", "dtype", "tie_word_embeddings"})
      if (j.contains(k) && !text.contains(k)) text[k] = j[k];
    j = std::move(text);
  }
  auto get_int = [&](const char* key, std::optional<int64_t> fallback = {}) -> int64_t {
    if (!j.contains(key) || j[key].is_null()) {
      if (fallback) return *fallback;
      throw FormatError(fmt::format("{}: missing '{}'", source, key));
    }
    if (!j[key].is_number_integer())
      throw FormatError(fmt::format("{}: '{}' must be an integer", source, key));
    return j[key].get<int64_t>();
  };
  auto get_float = [&](const char* key, double fallback) -> float {
    if (!j.contains(key) || j[key].is_null()) return static_cast<float>(fallback);
    if (!j[key].is_number())
      throw FormatError(fmt::format("{}: '{}' must be a number", source, key));
    return j[key].get<float>();
  };
  std::string arch_name;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch_name = j["architectures"][0].get<std::string>();
  else if (j.contains("model_type") && j["model_type"].is_string())
    arch_name = j["model_type"].get<std::string>();
  else
    throw FormatError(fmt::format("{}: neither 'architectures' nor 'model_type' is given", source));
  const ArchitectureDef& arch = find_architecture(arch_name);
  ModelConfig c;
  c.arch = arch.id;
  c.dim = get_int("hidden_size");
  c.n_layers = get_int("num_hidden_layers");
  c.n_heads = get_int("num_attention_heads");
  c.n_kv_heads = get_int("num_key_value_heads", c.n_heads);
  c.head_dim = get_int("head_dim", c.n_heads > 0 ? c.dim / c.n_heads : 0);
  c.ffn_dim = get_int("intermediate_size");
  c.vocab_size = get_int("vocab_size");
  c.max_seq_len = get_int("max_position_embeddings", 2048);
  c.rms_eps = get_float("rms_norm_eps", 1e-6);
  c.rope_theta = get_float("rope_theta", 10000.0);
  c.rope_style = ops::RopeStyle::neox;  // HF checkpoints use rotate_half
  c.tied_embeddings = j.value("tie_word_embeddings", false);
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_id = j["bos_token_id"].get<int32_t>();
  // An int or a list (Llama 3.1: [128001, 128008, 128009]); the first is the model's eos.
  // Generation stops on every one (runtime/stop_tokens.h).
  if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer())
    c.eos_id = j["eos_token_id"].get<int32_t>();
  else if (j.contains("eos_token_id") && j["eos_token_id"].is_array() &&
           !j["eos_token_id"].empty() && j["eos_token_id"][0].is_number_integer())
    c.eos_id = j["eos_token_id"][0].get<int32_t>();
  // Every field is honoured, harmless, refused by name here, or reported (config_fields.h).
  c.unrecognised_fields = check_hf_config_fields(j, arch, source);
  c.activation = hf_activation(j, "hidden_act", "silu", source);
  // transformers: rotary dims = int(head_dim * partial_rotary_factor), truncated.
  if (const double f = hf_partial_rotary_factor(j); f != 1.0) {
    if (!architecture_honours(arch, "partial_rotary_factor"))
      throw FormatError(
          fmt::format("{}: partial_rotary_factor {} is not supported for {} "
                      "(transformers rotates whole heads there)",
                      source, f, arch.name));
    if (!(f > 0 && f <= 1))
      throw FormatError(
          fmt::format("{}: partial_rotary_factor must be in (0, 1], got {}", source, f));
    c.rope_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * f);
  }
  read_hf_rope(j, c, source, arch.per_layer_rope);
  std::string torch_dtype = j.value("torch_dtype", j.value("dtype", std::string("float32")));
  c.weight_dtype = torch_dtype == "bfloat16"  ? DType::bf16
                   : torch_dtype == "float16" ? DType::f16
                                              : DType::f32;
  if (arch.configure_hf) arch.configure_hf(j, c, source);
  c.validate(source);
  return c;
}

ModelConfig config_from_gguf(const GgufMetadata& m) {
  const std::string arch_name = m.require_string("general.architecture");
  const ArchitectureDef& arch = find_architecture(arch_name);
  ModelConfig c;
  c.arch = arch.id;
  auto key = [&](const char* suffix) { return arch_name + "." + suffix; };
  c.dim = m.require_u32(key("embedding_length"));
  c.n_layers = m.require_u32(key("block_count"));
  c.n_heads = m.require_u32(key("attention.head_count"));
  c.n_kv_heads =
      m.get_u32(key("attention.head_count_kv")).value_or(static_cast<uint32_t>(c.n_heads));
  c.head_dim = m.get_u32(key("attention.key_length"))
                   .value_or(static_cast<uint32_t>(c.n_heads ? c.dim / c.n_heads : 0));
  c.ffn_dim = m.require_u32(key("feed_forward_length"));
  c.max_seq_len = m.get_u32(key("context_length")).value_or(2048);
  c.rms_eps = m.get_f32(key("attention.layer_norm_rms_epsilon")).value_or(1e-5f);
  c.rope_theta = m.get_f32(key("rope.freq_base")).value_or(10000.0f);
  c.rope_dim = m.get_u32(key("rope.dimension_count")).value_or(0);
  c.rope_style = ops::RopeStyle::neox;
  read_gguf_rope_scaling(m, arch_name, c);  // linear, yarn (models/gguf_rope_config.h)
  if (auto tokens = m.find_array_strings("tokenizer.ggml.tokens")) c.vocab_size = tokens->size();
  c.vocab_size = m.get_u32(key("vocab_size")).value_or(static_cast<uint32_t>(c.vocab_size));
  if (auto bos = m.get_u32("tokenizer.ggml.bos_token_id")) c.bos_id = *bos;
  if (auto eos = m.get_u32("tokenizer.ggml.eos_token_id")) c.eos_id = *eos;
  if (arch.configure_gguf) arch.configure_gguf(m, c);
  // vocab_size may still be 0 here; the loader fills it from token_embd's shape.
  return c;
}

}  // namespace refit
