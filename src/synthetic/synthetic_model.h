// Deterministic synthetic weights for any ModelConfig, for tests, benchmarks and the
// built-in demo model.
//
// Every element is a pure function of (seed, the tensor's Hugging Face name, the element's
// row-major index in the HF layout): a counter-based generator, so any single tensor — or any
// slice of one — can be regenerated without the others, in any order, on any number of
// threads, and a GGUF file and an HF folder made from the same seed hold the same values
// (GGUF llama q/k rows are then permuted as llama.cpp's converter does).
//
// Values are approximately N(mean, std): the sum of four 16-bit uniforms of one splitmix64
// draw (Irwin–Hall, within ±3.46 std). The scales follow the llama.cpp oracle pack
// (shared/oracle/llamacpp): they are larger than a trained model's so attention is not uniform
// and logits are not degenerate (logit std around 8):
//   embeddings and lm_head 0.18, q/k 0.10, v 0.08, o 0.20, gate/up 0.08, down 0.15, each times
//   sqrt(128 / dim) when dim > 128 (the oracle's dim), which keeps every projection's output
//   magnitude at the oracle's; biases 0.30 (not rescaled: the projection they are added to
//   keeps its magnitude); norm weights 1 + 0.2·N(0,1), the final norm times 4 as in the oracle.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/model_config.h"
#include "models/tensor_table.h"

namespace refit {

// Presets with the shapes of common real models:
//   tiny   dim 288,  6 layers,  6 heads (6 kv),  ff 768,  vocab 32000, tied   (stories15M)
//   small  dim 768,  12 layers, 12 heads (12 kv), ff 2048, vocab 32000, tied  (stories110M)
//   medium dim 2048, 22 layers, 32 heads (4 kv), ff 5632, vocab 32000, untied (TinyLlama-1.1B)
// The architecture sets the flags and the usual hyper-parameters: llama (rope 1e4, eps 1e-5),
// qwen2 (q/k/v biases, rope 1e6, eps 1e-6), qwen3 (q/k RMSNorm, rope 1e6, eps 1e-6).
// gpt-oss (experts as wide as the model, alternate layers sliding) also has 20b, the shapes
// of gpt-oss-20b (dim 2880, 24 layers, 32 experts, vocab 201088). Context length 2048.
// Throws naming the preset when it is unknown.
// `layers` > 0 replaces the preset's layer count (a real model's shapes, fewer layers).
ModelConfig synthetic_preset(Architecture arch, std::string_view preset, int64_t layers = 0);
inline constexpr const char* kSyntheticPresets[] = {"tiny", "small", "medium"};

struct SyntheticInit {
  float mean = 0.0f;
  float std = 0.0f;
};
// The distribution of one tensor of `config` (by role and HF name).
SyntheticInit synthetic_init(const ModelConfig& config, const TensorSpec& spec);

// Per-tensor generator key: mixes the seed with a hash of the HF name.
uint64_t synthetic_tensor_key(uint64_t seed, std::string_view hf_name);
// Element `index` (row-major in the HF layout) of the tensor with key `key`.
float synthetic_value(uint64_t key, int64_t index, SyntheticInit init);

// Elements [begin, begin + count) of the tensor, converted (round to nearest even) to
// `dtype` (f32, f16 or bf16) and written to `out`, which holds count elements of dtype.
// Runs on refit's thread pool for large counts.
void synthetic_fill(uint64_t key, SyntheticInit init, int64_t begin, int64_t count, DType dtype,
                    void* out);

// f32 -> f16 with round to nearest even, as f32_to_f16() but vectorised where the CPU has
// F16C (exposed for the test that pins the two to the same bits).
void synthetic_f32_to_f16(const float* in, uint16_t* out, int64_t n);

// The dtype a synthetic checkpoint stores a tensor in: norms and biases always f32 (as
// llama.cpp's converter and the oracle do), matmul weights and embeddings `weight_dtype`.
DType synthetic_storage_dtype(const TensorSpec& spec, DType weight_dtype);

// One tensor in the HF layout (q/k rows not permuted), in synthetic_storage_dtype().
Tensor synthetic_tensor(const ModelConfig& config, const TensorSpec& spec, DType weight_dtype,
                        uint64_t seed);

// All tensors of the model in memory, under their HF names, in model_tensor_specs() order.
// For the built-in demo model and tests; checkpoints are written tensor by tensor instead
// (synthetic/synthetic_checkpoint.h).
std::vector<std::pair<std::string, Tensor>> synthetic_weights(const ModelConfig& config,
                                                              DType weight_dtype, uint64_t seed);

}  // namespace refit
