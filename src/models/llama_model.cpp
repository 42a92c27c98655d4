#include "models/llama_model.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "layers/rotary.h"

namespace refit {

LlamaModel::LlamaModel(const ModelConfig& config, DType weight_dtype, const TensorParallel& tp)
    : config_(config), weight_dtype_(weight_dtype), tp_(tp) {
  config_.validate("model config");
  const ModelConfig& c = config_;
  embed_ = std::make_unique<VocabParallelEmbedding>(params_, "model.embed_tokens.weight", c.vocab_size, c.dim,
                                                    weight_dtype, tp_);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string prefix = fmt::format("model.layers.{}", l);
    Block b;
    b.attn_norm = &params_.add(prefix + ".input_layernorm.weight", {c.dim}, DType::f32);
    b.attention = std::make_unique<SelfAttention>(params_, l, config_, weight_dtype, tp_);
    b.ffn_norm = &params_.add(prefix + ".post_attention_layernorm.weight", {c.dim}, DType::f32);
    b.ffn = std::make_unique<FeedForward>(params_, l, c.dim, c.ffn_dim, weight_dtype, tp_);
    blocks_.push_back(std::move(b));
  }
  final_norm_ = &params_.add("model.norm.weight", {c.dim}, DType::f32);
  lm_head_ = std::make_unique<ParallelLmHead>(params_, "lm_head.weight", c.vocab_size, c.dim, weight_dtype, tp_,
                                              c.tied_embeddings ? &embed_->weight() : nullptr);
  rope_table_ = rope_cos_sin_table(config_, c.max_seq_len);
}

KvCache LlamaModel::make_cache(int64_t max_seq) const {
  const int64_t local_kv = blocks_.empty() ? config_.n_kv_heads : blocks_[0].attention->local_kv_heads();
  return KvCache(config_, max_seq > 0 ? max_seq : config_.max_seq_len, local_kv);
}

Tensor LlamaModel::forward(std::span<const int32_t> tokens, int64_t start_pos, KvCache& cache,
                           bool all_logits) const {
  const ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) fail("forward: no tokens given");
  if (start_pos < 0 || start_pos + T > std::min(cache.max_seq(), c.max_seq_len))
    fail("context length exceeded: {} tokens at position {} need {} positions, the context holds {}", T,
         start_pos, start_pos + T, std::min(cache.max_seq(), c.max_seq_len));
  Tensor ids = Tensor::empty({T}, DType::i32);
  Tensor positions = Tensor::empty({T}, DType::i32);
  for (int64_t t = 0; t < T; ++t) {
    ids.data<int32_t>()[t] = tokens[t];
    positions.data<int32_t>()[t] = static_cast<int32_t>(start_pos + t);
  }
  Tensor x = embed_->forward(ids);
  Tensor h = Tensor::empty({T, c.dim}, DType::f32);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    ops::rms_norm(x, b.attn_norm->data(), c.rms_eps, h);
    Tensor attn = b.attention->forward(h, positions, rope_table_, start_pos, cache.keys(l), cache.values(l));
    ops::add(x, attn, x);
    ops::rms_norm(x, b.ffn_norm->data(), c.rms_eps, h);
    Tensor ffn = b.ffn->forward(h);
    ops::add(x, ffn, x);
  }
  Tensor last = all_logits ? x : x.narrow(0, T - 1, 1).contiguous();
  Tensor normed = Tensor::empty(last.shape(), DType::f32);
  ops::rms_norm(last, final_norm_->data(), c.rms_eps, normed);
  return lm_head_->forward(normed);
}

}  // namespace refit
