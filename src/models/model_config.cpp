#include "models/model_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"

namespace refit {

const char* architecture_name(Architecture a) {
  switch (a) {
    case Architecture::llama: return "llama";
    case Architecture::mistral: return "mistral";
    case Architecture::qwen2: return "qwen2";
    case Architecture::qwen3: return "qwen3";
  }
  return "?";
}

Architecture architecture_from_name(const std::string& name) {
  if (name == "llama" || name == "LlamaForCausalLM") return Architecture::llama;
  if (name == "mistral" || name == "MistralForCausalLM") return Architecture::mistral;
  if (name == "qwen2" || name == "Qwen2ForCausalLM") return Architecture::qwen2;
  if (name == "qwen3" || name == "Qwen3ForCausalLM") return Architecture::qwen3;
  fail("unsupported architecture '{}' (refit runs llama, mistral, qwen2, qwen3)", name);
}

namespace {
// Architecture traits that are data, not code.
void apply_architecture_defaults(ModelConfig& c) {
  c.qkv_bias = c.arch == Architecture::qwen2;
  c.qk_norm = c.arch == Architecture::qwen3;
}
}  // namespace

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
  if (rotary_dim() > head_dim || rotary_dim() % 2 != 0)
    fail("{}: rotary dimension {} must be even and at most the head dimension {}", source,
         rotary_dim(), head_dim);
  if (!rope_freq_factors.empty() && static_cast<int64_t>(rope_freq_factors.size()) != rotary_dim() / 2)
    fail("{}: rope_freqs has {} entries, expected {}", source, rope_freq_factors.size(),
         rotary_dim() / 2);
  if (!(rms_eps > 0)) fail("{}: rms_norm_eps must be positive", source);
  if (!(rope_theta > 0)) fail("{}: rope_theta must be positive", source);
}

int64_t ModelConfig::n_params() const {
  int64_t per_layer = dim * q_dim() + 2 * dim * kv_dim() + q_dim() * dim + 3 * dim * ffn_dim + 2 * dim;
  if (qkv_bias) per_layer += q_dim() + 2 * kv_dim();
  if (qk_norm) per_layer += 2 * head_dim;
  int64_t total = n_layers * per_layer + vocab_size * dim + dim;
  if (!tied_embeddings) total += vocab_size * dim;
  return total;
}

ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const std::exception& e) {
    throw FormatError(fmt::format("{}: invalid JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw FormatError(fmt::format("{}: expected a JSON object", source));
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
    if (!j[key].is_number()) throw FormatError(fmt::format("{}: '{}' must be a number", source, key));
    return j[key].get<float>();
  };
  ModelConfig c;
  std::string arch_name;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch_name = j["architectures"][0].get<std::string>();
  else if (j.contains("model_type") && j["model_type"].is_string())
    arch_name = j["model_type"].get<std::string>();
  else
    throw FormatError(fmt::format("{}: neither 'architectures' nor 'model_type' is given", source));
  c.arch = architecture_from_name(arch_name);
  apply_architecture_defaults(c);
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
  if (j.contains("attention_bias") && j["attention_bias"].is_boolean())
    c.qkv_bias = j["attention_bias"].get<bool>() || c.arch == Architecture::qwen2;
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_id = j["bos_token_id"].get<int32_t>();
  if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer())
    c.eos_id = j["eos_token_id"].get<int32_t>();
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const auto& rs = j["rope_scaling"];
    std::string type = rs.value("rope_type", rs.value("type", std::string()));
    if (type == "llama3") {
      c.rope_scaling.enabled = true;
      c.rope_scaling.factor = rs.value("factor", 8.0f);
      c.rope_scaling.low_freq_factor = rs.value("low_freq_factor", 1.0f);
      c.rope_scaling.high_freq_factor = rs.value("high_freq_factor", 4.0f);
      c.rope_scaling.original_max_position = rs.value("original_max_position_embeddings", int64_t{8192});
    } else if (!type.empty() && type != "default") {
      throw FormatError(fmt::format("{}: rope_scaling type '{}' is not supported", source, type));
    }
  }
  std::string torch_dtype = j.value("torch_dtype", std::string("float32"));
  c.weight_dtype = torch_dtype == "bfloat16" ? DType::bf16
                   : torch_dtype == "float16" ? DType::f16 : DType::f32;
  c.validate(source);
  return c;
}

ModelConfig config_from_gguf(const GgufMetadata& m) {
  ModelConfig c;
  const std::string arch = m.require_string("general.architecture");
  c.arch = architecture_from_name(arch);
  apply_architecture_defaults(c);
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  c.dim = m.require_u32(key("embedding_length"));
  c.n_layers = m.require_u32(key("block_count"));
  c.n_heads = m.require_u32(key("attention.head_count"));
  c.n_kv_heads = m.get_u32(key("attention.head_count_kv")).value_or(static_cast<uint32_t>(c.n_heads));
  c.head_dim = m.get_u32(key("attention.key_length")).value_or(static_cast<uint32_t>(c.n_heads ? c.dim / c.n_heads : 0));
  c.ffn_dim = m.require_u32(key("feed_forward_length"));
  c.max_seq_len = m.get_u32(key("context_length")).value_or(2048);
  c.rms_eps = m.get_f32(key("attention.layer_norm_rms_epsilon")).value_or(1e-5f);
  c.rope_theta = m.get_f32(key("rope.freq_base")).value_or(10000.0f);
  c.rope_dim = m.get_u32(key("rope.dimension_count")).value_or(0);
  // llama.cpp runs llama/mistral with adjacent-pair ("NORM") rope on q/k rows its
  // converter permuted; the loader permutes them back to Hugging Face order, where
  // rotate_half ("neox") is the same rotation. Qwen files are in that order already.
  c.rope_style = ops::RopeStyle::neox;
  if (auto tokens = m.find_array_strings("tokenizer.ggml.tokens")) c.vocab_size = tokens->size();
  c.vocab_size = m.get_u32(key("vocab_size")).value_or(static_cast<uint32_t>(c.vocab_size));
  if (auto bos = m.get_u32("tokenizer.ggml.bos_token_id")) c.bos_id = *bos;
  if (auto eos = m.get_u32("tokenizer.ggml.eos_token_id")) c.eos_id = *eos;
  // vocab_size may still be 0 here; the loader fills it from token_embd's shape.
  return c;
}

}  // namespace refit
