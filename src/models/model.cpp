#include "models/model.h"

#include "core/error.h"
#include "layers/paged_kv_store.h"
#include "models/decoder_model.h"

namespace refit {

Tensor Model::forward(std::span<const int32_t> tokens, int64_t start_pos, KvCache& cache,
                      bool all_logits) const {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t context = std::min(cache.max_seq(), config().max_seq_len);
  if (T == 0) fail("forward: no tokens given");
  if (start_pos < 0 || start_pos + T > context)
    fail(
        "context length exceeded: {} tokens at position {} need {} positions, the context holds {}",
        T, start_pos, start_pos + T, context);
  BatchSequence s;
  s.tokens = tokens;
  s.start_pos = start_pos;
  s.logits = all_logits ? LogitsWanted::all : LogitsWanted::last;
  ContiguousKvStore kv(cache);
  return forward(std::span<const BatchSequence>(&s, 1), kv).logits;
}

KvCache Model::make_cache(int64_t max_seq) const {
  const ModelConfig& c = config();
  return KvCache(c.n_layers, max_seq > 0 ? max_seq : c.max_seq_len, local_kv_heads(), c.head_dim);
}

PagedKvCache make_paged_cache(const Model& model, int64_t n_blocks, int64_t block_size) {
  PagedKvCacheOptions o;
  o.n_layers = model.config().n_layers;
  o.n_kv_heads = model.local_kv_heads();
  o.head_dim = model.config().head_dim;
  o.block_size = block_size;
  o.n_blocks = n_blocks;
  return PagedKvCache(o);
}

BatchForwardResult batched_forward(const Model& model, std::span<const BatchSequence> batch,
                                   PagedKvCache& cache) {
  const ModelConfig& c = model.config();
  if (cache.options().n_layers != c.n_layers || cache.options().head_dim != c.head_dim)
    fail("batched_forward: the paged cache has {} layers of head_dim {}, the model {} of {}",
         cache.options().n_layers, cache.options().head_dim, c.n_layers, c.head_dim);
  PagedKvStore kv(cache);
  return model.forward(batch, kv);
}

std::unique_ptr<Model> create_model(const ModelConfig& config, DType weight_dtype,
                                    const TensorParallel& tp) {
  return std::make_unique<DecoderModel>(config, weight_dtype, tp);
}

}  // namespace refit
