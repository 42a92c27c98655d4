#include "synthetic/synthetic_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/float_formats.h"
#include "core/thread_pool.h"
#include "models/architecture.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace refit {

ModelConfig synthetic_preset(Architecture arch, std::string_view preset, int64_t layers) {
  ModelConfig c;
  c.arch = arch;
  if (preset == "tiny") {
    c.dim = 288, c.n_layers = 6, c.n_heads = 6, c.n_kv_heads = 6, c.ffn_dim = 768;
    c.tied_embeddings = true;
  } else if (preset == "small") {
    c.dim = 768, c.n_layers = 12, c.n_heads = 12, c.n_kv_heads = 12, c.ffn_dim = 2048;
    c.tied_embeddings = true;
  } else if (preset == "medium") {
    c.dim = 2048, c.n_layers = 22, c.n_heads = 32, c.n_kv_heads = 4, c.ffn_dim = 5632;
    c.tied_embeddings = false;
  } else if (preset == "20b" && arch == Architecture::gpt_oss) {
    // gpt-oss-20b's shapes (its config.json): 24 layers of 32 experts, 4 per token, each
    // 2880 wide; 64 query heads of 64 over 8 KV heads; the o200k vocabulary's 201088 rows.
    c.dim = 2880, c.n_layers = 24, c.n_heads = 64, c.n_kv_heads = 8, c.ffn_dim = 2880;
    c.tied_embeddings = false;
  } else {
    fail("unknown synthetic preset '{}' (expected tiny, small or medium{})", preset,
         arch == Architecture::gpt_oss ? ", or 20b" : "");
  }
  c.head_dim = c.dim / c.n_heads;
  c.vocab_size = 32000;
  if (preset == "20b") c.head_dim = 64, c.vocab_size = 201088;
  if (layers < 0) fail("synthetic preset '{}': {} layers", preset, layers);
  if (layers > 0) c.n_layers = layers;
  c.max_seq_len = 2048;
  c.bos_id = 1;
  c.eos_id = 2;
  switch (arch) {
    case Architecture::llama:
    case Architecture::mistral:
      c.rms_eps = 1e-5f;
      c.rope_theta = 10000.0f;
      break;
    case Architecture::qwen2:
      c.qkv_bias = true;
      c.rms_eps = 1e-6f;
      c.rope_theta = 1000000.0f;
      break;
    case Architecture::qwen3:
      c.qk_norm = true;
      c.rms_eps = 1e-6f;
      c.rope_theta = 1000000.0f;
      break;
    case Architecture::qwen3moe: {
      // Qwen3-30B-A3B's proportions: 128 experts of width ffn/8... scaled to the preset:
      // 8 experts, 2 per token, each a quarter of the dense width, every layer sparse.
      c.rms_eps = 1e-6f;
      c.rope_theta = 1000000.0f;
      c.tied_embeddings = false;
      const nlohmann::json j = {{"num_experts", 8},
                                {"num_experts_per_tok", 2},
                                {"moe_intermediate_size", c.ffn_dim / 4},
                                {"norm_topk_prob", true},
                                {"decoder_sparse_step", 1}};
      architecture_def(arch).configure_hf(j, c, fmt::format("synthetic preset '{}'", preset));
      break;
    }
    case Architecture::gemma3:
    case Architecture::phi3: {
      // The architecture's own config reading, from the fields a real config.json sets.
      c.rms_eps = 1e-6f;
      c.rope_theta = arch == Architecture::gemma3 ? 1000000.0f : 10000.0f;
      c.tied_embeddings = arch == Architecture::gemma3;
      nlohmann::json j = arch == Architecture::gemma3
                             ? nlohmann::json{{"sliding_window", 512},
                                              {"sliding_window_pattern", 6},
                                              {"rope_local_base_freq", 10000.0},
                                              {"query_pre_attn_scalar", c.head_dim},
                                              {"tie_word_embeddings", true}}
                             : nlohmann::json::object();
      architecture_def(arch).configure_hf(j, c, fmt::format("synthetic preset '{}'", preset));
      break;
    }
    case Architecture::gpt_oss: {
      // gpt-oss's proportions: experts as wide as the model, every other layer (from 0)
      // sliding with a window of 128, rope 150000 (YaRN left out: the presets' contexts
      // stay within the trained 4096), 8 experts (32 in 20b) with 2 (4) per token.
      c.rms_eps = 1e-5f;
      c.rope_theta = 150000.0f;
      c.ffn_dim = c.dim;
      const bool real = preset == "20b";
      nlohmann::json kinds = nlohmann::json::array();
      for (int64_t l = 0; l < c.n_layers; ++l)
        kinds.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
      const nlohmann::json j = {{"num_local_experts", real ? 32 : 8},
                                {"num_experts_per_tok", real ? 4 : 2},
                                {"sliding_window", 128},
                                {"layer_types", kinds},
                                {"swiglu_limit", 7.0}};
      architecture_def(arch).configure_hf(j, c, fmt::format("synthetic preset '{}'", preset));
      break;
    }
  }
  // HF checkpoints rotate halves; the GGUF writer permutes llama q/k rows to match
  // llama.cpp's adjacent-pair rope, and config_from_gguf() selects that style on load.
  c.rope_style = ops::RopeStyle::neox;
  c.validate(fmt::format("synthetic preset '{}'", preset));
  return c;
}

// Defined below; used by fill_chunk.
void synthetic_f32_to_f16(const float* in, uint16_t* out, int64_t n);

namespace {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Irwin–Hall(4) of 16-bit uniforms, centred: an integer in [-131070, 131070] with
// variance 65536² / 3 (up to the 1/65536² discretisation).
inline int32_t centred_sum(uint64_t u) {
  int32_t s = static_cast<int32_t>(u & 0xFFFF) + static_cast<int32_t>((u >> 16) & 0xFFFF) +
              static_cast<int32_t>((u >> 32) & 0xFFFF) + static_cast<int32_t>(u >> 48);
  return 2 * s - 4 * 65535;  // twice (s - mean) so it stays an integer
}

// Scale turning centred_sum() into unit variance: sqrt(3) / 65536 / 2.
constexpr double kUnitScale = 1.7320508075688772 / 65536.0 / 2.0;

// The value is computed as float(mean) + float(c * k) with c*k rounded first, so the result
// is bit-identical whether or not the compiler may fuse a multiply-add.
inline float value_of(uint64_t key, int64_t index, float c, float mean) {
  const float scaled =
      c * static_cast<float>(
              centred_sum(splitmix64(key + static_cast<uint64_t>(index) * 0xD1B54A32D192ED03ull)));
  if (mean == 0.0f) return scaled;
  volatile float keep = scaled;  // no fma contraction with the addition below
  return mean + keep;
}

#if defined(__x86_64__)
// F16C rounds to nearest even like f32_to_f16() (a unit test checks they agree bit for bit)
// and is ~30x faster: it is what keeps the 1.1B-parameter f16 preset a matter of seconds.
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* in, uint16_t* out,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}
const bool kHaveF16c = cpu_has_avx_f16c();
#endif

void fill_chunk(uint64_t key, float c, float mean, int64_t begin, int64_t count, DType dtype,
                void* out) {
  if (dtype == DType::f32) {
    float* o = static_cast<float*>(out);
    for (int64_t i = 0; i < count; ++i) o[i] = value_of(key, begin + i, c, mean);
    return;
  }
  uint16_t* o = static_cast<uint16_t*>(out);
  if (dtype == DType::bf16) {
    for (int64_t i = 0; i < count; ++i) o[i] = f32_to_bf16(value_of(key, begin + i, c, mean));
    return;
  }
  constexpr int64_t kBlock = 1024;
  float block[kBlock];
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t n = std::min(kBlock, count - b);
    for (int64_t i = 0; i < n; ++i) block[i] = value_of(key, begin + b + i, c, mean);
    synthetic_f32_to_f16(block, o + b, n);
  }
}

}  // namespace

void synthetic_f32_to_f16(const float* in, uint16_t* out, int64_t n) {
#if defined(__x86_64__)
  if (kHaveF16c) return f32_to_f16_f16c(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

SyntheticInit synthetic_init(const ModelConfig& config, const TensorSpec& spec) {
  const std::string& name = spec.hf_name;
  const float rescale = config.dim > 128 ? static_cast<float>(std::sqrt(128.0 / config.dim)) : 1.0f;
  switch (spec.role) {
    case TensorRole::norm: {
      float std = 0.2f;
      // The gain a norm multiplies by is about 1: w itself, or 1 + w where the
      // architecture stores the offset (Gemma).
      float mean = 1.0f - config.norm_weight_offset;
      if (spec.slot == TensorSlot::output_norm)
        mean += 3.0f, std *= 4.0f;  // the oracle's output_norm × 4
      return {mean, std};
    }
    case TensorRole::bias:
      return {0.0f, 0.30f};
    case TensorRole::embedding:
      return {0.0f, 0.18f * rescale};
    case TensorRole::router:
      return {0.0f, 0.25f * rescale};
    case TensorRole::matmul:
      break;
  }
  // The oracle's stds (../shared/oracle/llamacpp/README.md), by what the tensor is.
  switch (spec.slot) {
    case TensorSlot::attn_q:
    case TensorSlot::attn_k:
    case TensorSlot::attn_qkv:
      return {0.0f, 0.10f * rescale};
    case TensorSlot::attn_v:
      return {0.0f, 0.08f * rescale};
    case TensorSlot::attn_output:
      return {0.0f, 0.20f * rescale};
    case TensorSlot::ffn_gate:
    case TensorSlot::ffn_up:
    case TensorSlot::ffn_gate_up:
      return {0.0f, 0.08f * rescale};
    case TensorSlot::ffn_down:
      return {0.0f, 0.15f * rescale};
    case TensorSlot::output:
      return {0.0f, 0.18f * rescale};
    case TensorSlot::ffn_gate_exps:
    case TensorSlot::ffn_up_exps:
      return {0.0f, 0.08f * rescale};
    case TensorSlot::ffn_down_exps:
      return {0.0f, 0.30f * rescale};
    default:
      break;
  }
  fail("synthetic weights: no initialisation is defined for tensor '{}'", name);
}

uint64_t synthetic_tensor_key(uint64_t seed, std::string_view hf_name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64
  for (unsigned char ch : hf_name) h = (h ^ ch) * 0x100000001B3ull;
  return splitmix64(splitmix64(seed) ^ h);
}

float synthetic_value(uint64_t key, int64_t index, SyntheticInit init) {
  return value_of(key, index, static_cast<float>(init.std * kUnitScale), init.mean);
}

void synthetic_fill(uint64_t key, SyntheticInit init, int64_t begin, int64_t count, DType dtype,
                    void* out) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    fail("synthetic weights: dtype {} is not supported (f32, f16 or bf16)", dtype_name(dtype));
  if (count <= 0) return;
  const float c = static_cast<float>(init.std * kUnitScale);
  const size_t elem = dtype_nbytes(dtype, 1);
  constexpr int64_t kChunk = 1 << 16;
  const int64_t n_chunks = (count + kChunk - 1) / kChunk;
  auto run = [&](int64_t first, int64_t last, int) {
    for (int64_t ch = first; ch < last; ++ch) {
      const int64_t b = ch * kChunk;
      const int64_t n = std::min(kChunk, count - b);
      fill_chunk(key, c, init.mean, begin + b, n, dtype, static_cast<uint8_t*>(out) + b * elem);
    }
  };
  if (n_chunks == 1)
    run(0, 1, 0);
  else
    parallel_for(n_chunks, run);
}

DType synthetic_storage_dtype(const TensorSpec& spec, DType weight_dtype) {
  return (spec.role == TensorRole::norm || spec.role == TensorRole::bias ||
          spec.role == TensorRole::router)
             ? DType::f32
             : weight_dtype;
}

Tensor synthetic_tensor(const ModelConfig& config, const TensorSpec& spec, DType weight_dtype,
                        uint64_t seed) {
  const DType dtype = synthetic_storage_dtype(spec, weight_dtype);
  Tensor t = Tensor::empty(spec.shape, dtype);
  synthetic_fill(synthetic_tensor_key(seed, spec.hf_name), synthetic_init(config, spec), 0,
                 t.numel(), dtype, t.raw_data());
  return t;
}

std::vector<std::pair<std::string, Tensor>> synthetic_weights(const ModelConfig& config,
                                                              DType weight_dtype, uint64_t seed) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const TensorSpec& spec : model_tensor_specs(config))
    out.emplace_back(spec.hf_name, synthetic_tensor(config, spec, weight_dtype, seed));
  return out;
}

}  // namespace refit
