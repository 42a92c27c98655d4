// One forward pass over a batch of sequences whose keys and values live in a paged KV
// cache: the heart of continuous batching.
//
// All new tokens of all sequences are stacked into one [N, dim] activation, so every
// weight matrix is read once per step for the whole batch (one matmul per weight, M = N);
// only attention runs per sequence, over that sequence's blocks (ops::paged_attention).
// A sequence may bring one token (decode) or many (a prompt, or one chunk of it).
//
// Batch invariance: every kernel on this path computes a row the same way whatever the
// other rows are (matmul, rms_norm, rope, silu, add are row-wise with a fixed reduction
// order; paged attention is per (token, head)). So a sequence's logits are bitwise the same
// alone or in any batch, and whether its prompt came in one chunk or several — provided
// the f32 matmul is the batch-invariant kernel (kernels/cpu/serve_kernels.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "layers/paged_kv_cache.h"
#include "models/llama_model.h"

namespace refit {

enum class LogitsWanted : uint8_t {
  none,  // an intermediate prompt chunk: only its k/v matter
  last,  // the row of the last new token (sampling)
  all,   // a row per new token (prompt logprobs, teacher forcing)
};

struct BatchSequence {
  std::span<const int32_t> tokens;       // the new tokens, at positions start_pos..
  int64_t start_pos = 0;                 // positions before it are already in the cache
  std::span<const int32_t> block_table;  // must cover start_pos + tokens.size() positions
  LogitsWanted logits = LogitsWanted::last;
};

struct BatchForwardResult {
  Tensor logits;                  // f32 [R, vocab]: the wanted rows, sequence by sequence
  std::vector<int64_t> first_row;  // per sequence: its first row in `logits`
  std::vector<int64_t> n_rows;     // per sequence: how many rows it has
};

// Writes each sequence's new k/v into `cache` and returns the wanted logits rows.
// Throws (naming the sequence) when a table is too short or a position exceeds the
// model's context; nothing is computed then.
BatchForwardResult batched_forward(const LlamaModel& model, std::span<const BatchSequence> batch,
                                   PagedKvCache& cache);

// A paged cache sized for `model` (this rank's kv heads) with n_blocks blocks.
PagedKvCache make_paged_cache(const LlamaModel& model, int64_t n_blocks, int64_t block_size = 16);

}  // namespace refit
