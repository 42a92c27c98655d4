// The one Llama-family model definition (Llama 1/2/3, Mistral, Qwen2, Qwen3, llama2.c).
// Architecture differences are fields of ModelConfig, read by the layers.
//
//   x = embed[tokens]
//   per layer: x += attn(rmsnorm(x)); x += ffn(rmsnorm(x))
//   logits = lm_head(rmsnorm(x))        (lm_head = embed when tied)
//
// Parameters use Hugging Face names; fused ones (qkv_proj, gate_up_proj) are filled from
// the q/k/v and gate/up checkpoint tensors. With tensor parallelism each rank holds its
// shard and the layers all-reduce / all-gather through the communicator.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "layers/embedding.h"
#include "layers/feed_forward.h"
#include "layers/kv_cache.h"
#include "layers/self_attention.h"
#include "models/model_config.h"
#include "weights/parameter_set.h"

namespace refit {

class LlamaModel {
 public:
  struct Block {
    Parameter* attn_norm;
    std::unique_ptr<SelfAttention> attention;
    Parameter* ffn_norm;
    std::unique_ptr<FeedForward> ffn;
  };

  // Creates every parameter (zero-filled) with matmul weights and the embedding stored
  // in `weight_dtype` (f32, f16 or bf16); norms and biases are f32.
  LlamaModel(const ModelConfig& config, DType weight_dtype, const TensorParallel& tp = {});

  const ModelConfig& config() const { return config_; }
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }
  DType weight_dtype() const { return weight_dtype_; }
  const TensorParallel& tensor_parallel() const { return tp_; }

  // Runs `tokens` at positions start_pos.. and writes their k/v into `cache`. Returns
  // f32 logits [T, vocab] for every position when all_logits, else [1, vocab] for the last.
  Tensor forward(std::span<const int32_t> tokens, int64_t start_pos, KvCache& cache,
                 bool all_logits = false) const;

  KvCache make_cache(int64_t max_seq = 0) const;  // 0: the model's context length

  // Pieces, for forward passes over other cache layouts (the server's paged cache).
  const std::vector<Block>& blocks() const { return blocks_; }
  const VocabParallelEmbedding& embedding() const { return *embed_; }
  const Parameter& final_norm() const { return *final_norm_; }
  const ParallelLmHead& lm_head() const { return *lm_head_; }
  const Tensor& rope_table() const { return rope_table_; }

 private:
  ModelConfig config_;
  DType weight_dtype_;
  TensorParallel tp_;
  ParameterSet params_;
  std::unique_ptr<VocabParallelEmbedding> embed_;
  std::vector<Block> blocks_;
  Parameter* final_norm_;
  std::unique_ptr<ParallelLmHead> lm_head_;
  Tensor rope_table_;
};

}  // namespace refit
