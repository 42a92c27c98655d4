// The one Llama-family model definition (Llama 1/2/3, Mistral, Qwen2, Qwen3, llama2.c).
// Architecture differences are fields of ModelConfig, read by the layers.
//
//   x = embed[tokens]
//   per layer: x += attn(rmsnorm(x)); x += ffn(rmsnorm(x))
//   logits = lm_head(rmsnorm(x))        (lm_head = embed when tied)
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "layers/feed_forward.h"
#include "layers/kv_cache.h"
#include "layers/self_attention.h"
#include "models/model_config.h"
#include "weights/parameter_set.h"

namespace refit {

class LlamaModel {
 public:
  // Creates every parameter (zero-filled) with matmul weights and the embedding stored
  // in `weight_dtype` (f32, f16 or bf16); norms and biases are f32.
  LlamaModel(const ModelConfig& config, DType weight_dtype);

  const ModelConfig& config() const { return config_; }
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }
  DType weight_dtype() const { return weight_dtype_; }

  // Runs `tokens` at positions start_pos.. and writes their k/v into `cache`. Returns
  // f32 logits [T, vocab] for every position when all_logits, else [1, vocab] for the last.
  Tensor forward(std::span<const int32_t> tokens, int64_t start_pos, KvCache& cache,
                 bool all_logits = false) const;

  KvCache make_cache(int64_t max_seq = 0) const;  // 0: the model's context length

 private:
  struct Block {
    Parameter* attn_norm;
    std::unique_ptr<SelfAttention> attention;
    Parameter* ffn_norm;
    std::unique_ptr<FeedForward> ffn;
  };
  ModelConfig config_;
  DType weight_dtype_;
  ParameterSet params_;
  Parameter* embed_;
  std::vector<Block> blocks_;
  Parameter* final_norm_;
  Parameter* lm_head_;  // == embed_ when tied
  Tensor rope_table_;
};

}  // namespace refit
