// What the engine, the scheduler, the tensor-parallel ranks and the benchmarks know of
// a model: its config, its parameters (the tensors a trainer replaces in place), and one
// forward pass over a batch of sequences whose keys and values live in a KvStore. A
// single sequence over a contiguous cache is a batch of one.
#pragma once

#include <memory>
#include <span>

#include "layers/kv_cache.h"
#include "layers/paged_kv_cache.h"
#include "layers/tensor_parallel.h"
#include "models/model_config.h"
#include "weights/parameter_set.h"

namespace refit {

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual ParameterSet& parameters() = 0;
  virtual const ParameterSet& parameters() const = 0;
  virtual DType weight_dtype() const = 0;
  virtual const TensorParallel& tensor_parallel() const = 0;
  virtual int64_t local_kv_heads() const = 0;  // this rank's kv heads: what a cache holds

  // Writes each sequence's new k/v into `kv` and returns the wanted logits rows. Throws
  // (naming the sequence) when a table is too short or a position exceeds the model's
  // context; nothing is computed then.
  virtual BatchForwardResult forward(std::span<const BatchSequence> batch, KvStore& kv) const = 0;

  // One sequence: `tokens` at positions start_pos.. over a contiguous cache. Returns f32
  // logits [T, vocab] for every position when all_logits, else [1, vocab] for the last.
  Tensor forward(std::span<const int32_t> tokens, int64_t start_pos, KvCache& cache,
                 bool all_logits = false) const;
  KvCache make_cache(int64_t max_seq = 0) const;  // 0: the model's context length
};

// A paged cache sized for `model` (this rank's kv heads) with n_blocks blocks.
PagedKvCache make_paged_cache(const Model& model, int64_t n_blocks, int64_t block_size = 16);

// The forward pass over the paged cache, as the scheduler and tensor-parallel workers run it.
BatchForwardResult batched_forward(const Model& model, std::span<const BatchSequence> batch,
                                   PagedKvCache& cache);

// A model of `config`'s architecture with every parameter zero-filled; matmul weights and
// the embedding in `weight_dtype` (f32, f16 or bf16), norms and biases f32.
std::unique_ptr<Model> create_model(const ModelConfig& config, DType weight_dtype,
                                    const TensorParallel& tp = {});

}  // namespace refit
