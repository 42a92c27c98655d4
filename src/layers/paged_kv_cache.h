// Paged key/value cache shared by every sequence a server runs at once (vLLM's
// PagedAttention layout). Memory is a pool of fixed-size blocks; a sequence owns an
// ordered list of block ids (its block table), so sequences of any length share one
// pool without fragmentation and a finished sequence returns its blocks at once.
//
//   keys(layer), values(layer): f32 [n_blocks, block_size, n_kv_heads, head_dim]
//   position p of a sequence lives in block table[p / block_size], row p % block_size.
//
// Blocks are reference counted so a prefix cache can share full blocks between
// sequences; allocate() hands out blocks with count 1, release() drops one reference
// and returns the block to the free list at zero. Every pool tensor is a plain strided
// tensor over its own storage, so it can be exported through DLPack (law L1).
//
// Not thread-safe: the scheduler's loop is the only user.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace refit {

struct PagedKvCacheOptions {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;  // this rank's kv heads
  int64_t head_dim = 0;
  int64_t block_size = 16;  // tokens per block
  int64_t n_blocks = 0;     // pool size
};

struct PagedKvCacheStats {
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;
  int64_t used_blocks = 0;
  int64_t block_size = 0;
  double usage() const {
    return total_blocks > 0 ? static_cast<double>(used_blocks) / static_cast<double>(total_blocks) : 0.0;
  }
};

class PagedKvCache {
 public:
  explicit PagedKvCache(const PagedKvCacheOptions& options);

  const PagedKvCacheOptions& options() const { return options_; }
  int64_t block_size() const { return options_.block_size; }
  int64_t n_blocks() const { return options_.n_blocks; }
  // Blocks needed to hold `tokens` positions.
  int64_t blocks_for(int64_t tokens) const { return (tokens + options_.block_size - 1) / options_.block_size; }
  // Bytes of one block over all layers (keys and values).
  size_t block_nbytes() const;

  Tensor& keys(int64_t layer) { return keys_.at(static_cast<size_t>(layer)); }
  Tensor& values(int64_t layer) { return values_.at(static_cast<size_t>(layer)); }
  const Tensor& keys(int64_t layer) const { return keys_.at(static_cast<size_t>(layer)); }
  const Tensor& values(int64_t layer) const { return values_.at(static_cast<size_t>(layer)); }

  // n fresh blocks (reference count 1), or nullopt when fewer than n are free (nothing
  // is taken then).
  std::optional<std::vector<int32_t>> allocate(int64_t n);
  // Another reference to a block that is in use (prefix sharing).
  void retain(int32_t block);
  // Drops one reference to each block; a block is free again when its count reaches 0.
  void release(std::span<const int32_t> blocks);
  int32_t ref_count(int32_t block) const;
  int64_t free_blocks() const { return static_cast<int64_t>(free_list_.size()); }
  PagedKvCacheStats stats() const;

  // Grows `table` so it covers `tokens` positions. False (table unchanged) when the pool
  // lacks the blocks.
  bool reserve(std::vector<int32_t>& table, int64_t tokens);

  // Writes k, v (f32 [T, n_kv_heads, head_dim]) of positions start_pos .. start_pos+T-1
  // of the sequence with this block table into layer `layer`. The table must cover them.
  void write(int64_t layer, std::span<const int32_t> table, int64_t start_pos, const Tensor& k,
             const Tensor& v);

 private:
  void check_block(int32_t block, const char* what) const;

  PagedKvCacheOptions options_;
  std::vector<Tensor> keys_, values_;
  std::vector<int32_t> free_list_;   // LIFO: recently freed blocks are warm in cache
  std::vector<int32_t> ref_counts_;  // per block; 0 = free
};

}  // namespace refit
