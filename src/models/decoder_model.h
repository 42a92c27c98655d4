// The decoder-only transformer every architecture refit runs is an instance of: one
// block loop whose per-layer differences are data (LayerConfig), parameters created from
// the architecture's tensor table.
//
//   x = embed[tokens] * embedding_scale
//   per layer: x += post_attn_norm?(attn(norm(x))); x += post_ffn_norm?(ffn(norm(x)))
//   logits = lm_head(norm(x))        (lm_head = embed when tied)
//
// Parameters use Hugging Face names; fused ones (qkv_proj, gate_up_proj) are filled from
// the q/k/v and gate/up checkpoint tensors, or from one tensor where the checkpoint
// stores them fused. With tensor parallelism each rank holds its shard and the layers
// all-reduce / all-gather through the communicator.
//
// Batch invariance: every kernel on this path computes a row the same way whatever the
// other rows are (matmul, rms_norm, rope, silu, add are row-wise with a fixed reduction
// order; attention is per (token, head)). So a sequence's logits are bitwise the same
// alone or in any batch, and whether its prompt came in one chunk or several — provided
// the f32 matmul is the batch-invariant kernel (kernels/cpu/serve_kernels.h).
#pragma once

#include <memory>
#include <vector>

#include "layers/embedding.h"
#include "layers/feed_forward.h"
#include "layers/moe_feed_forward.h"
#include "layers/self_attention.h"
#include "models/model.h"

namespace refit {

class DecoderModel : public Model {
 public:
  struct Block {
    LayerConfig config;
    int64_t rope_table = 0;  // index into rope_tables()
    Parameter* attn_norm = nullptr;
    std::unique_ptr<SelfAttention> attention;
    Parameter* post_attn_norm = nullptr;  // sandwich norms only
    Parameter* ffn_norm = nullptr;
    std::unique_ptr<FeedForward> ffn;     // dense layers
    std::unique_ptr<MoeFeedForward> moe;  // mixture-of-experts layers
    Parameter* post_ffn_norm = nullptr;   // sandwich norms only
  };

  DecoderModel(const ModelConfig& config, DType weight_dtype, const TensorParallel& tp = {});

  const ModelConfig& config() const override { return config_; }
  ParameterSet& parameters() override { return params_; }
  const ParameterSet& parameters() const override { return params_; }
  DType weight_dtype() const override { return weight_dtype_; }
  const TensorParallel& tensor_parallel() const override { return tp_; }
  int64_t local_kv_heads() const override;
  BatchForwardResult forward(std::span<const BatchSequence> batch, KvStore& kv) const override;
  using Model::forward;

  const std::vector<Block>& blocks() const { return blocks_; }
  const std::vector<Tensor>& rope_tables() const { return rope_tables_; }

 private:
  void add_block(int64_t layer);
  // Mixture of experts: allocates result.routed_experts and returns the batch's forced
  // routing, i32 [N, moe layers, k] (-1 rows route freely), or undefined when none is forced.
  Tensor forced_routing(std::span<const BatchSequence> batch, BatchForwardResult& result) const;
  // f32 logits of rows `rows` of the final activation x [N, dim].
  Tensor logits(const Tensor& x, const std::vector<int64_t>& rows) const;
  // out = rmsnorm(x) * (w + the config's weight offset)
  void norm(const Tensor& x, const Parameter& w, Tensor& out) const;

  ModelConfig config_;
  DType weight_dtype_;
  TensorParallel tp_;
  ParameterSet params_;
  std::unique_ptr<VocabParallelEmbedding> embed_;
  std::vector<Block> blocks_;
  Parameter* final_norm_;
  std::unique_ptr<ParallelLmHead> lm_head_;
  std::vector<Tensor> rope_tables_;  // one per distinct rope setting
  std::vector<RopeConfig> ropes_;
};

}  // namespace refit
