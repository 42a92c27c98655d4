// Paged key/value cache shared by every sequence a server runs at once (vLLM's
// PagedAttention layout). Memory is a pool of fixed-size blocks; a sequence owns an
// ordered list of block ids (its block table), so sequences of any length share one
// pool without fragmentation and a finished sequence returns its blocks at once.
//
//   keys(layer), values(layer): f32 [n_blocks, block_size, n_kv_heads, head_dim], a view
//   of head-major storage [n_blocks, n_kv_heads, block_size, head_dim] (strides, not a copy)
//   position p of a sequence lives in block table[p / block_size], row p % block_size.
//
// Blocks are reference counted so a prefix cache can share full blocks between
// sequences; allocate() hands out blocks with count 1, release() drops one reference
// and returns the block to the free list at zero. Every pool tensor is a plain strided
// tensor over its own storage, so it can be exported through DLPack (law L1).
//
// Prefix cache (vLLM's automatic prefix caching, SGLang's radix cache by another name): a
// FULL block whose k/v are computed can be published under its content key, a hash chain
// over (parent block's key, the block's token ids). A later sequence whose tokens start
// the same way looks its blocks up in order and shares them (one more reference each)
// instead of recomputing them; the k/v of position p depend only on tokens 0..p and the
// weights, so a shared block holds exactly what the sequence would have computed. A
// published block whose count drops to zero is not freed but parked in an LRU list:
// it can still be hit, and allocate() evicts the least recently released one only when
// the free list is empty. Lookups compare the stored tokens and parent key, not just the
// 64-bit hash. drop_prefix_cache() forgets every key (a weight update makes them stale).
//
// Not thread-safe: the scheduler's loop is the only user.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
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
  int64_t free_blocks = 0;  // allocatable: never used, or cached and unreferenced (evictable)
  int64_t used_blocks = 0;  // referenced by at least one sequence
  int64_t block_size = 0;
  int64_t cached_blocks = 0;     // published in the prefix cache (in use or evictable)
  int64_t evictable_blocks = 0;  // published and unreferenced (part of free_blocks)
  uint64_t evictions = 0;        // cached blocks reused for new content
  uint64_t dropped = 0;          // cached keys forgotten by drop_prefix_cache()
  double usage() const {
    return total_blocks > 0 ? static_cast<double>(used_blocks) / static_cast<double>(total_blocks)
                            : 0.0;
  }
};

class PagedKvCache {
 public:
  explicit PagedKvCache(const PagedKvCacheOptions& options);

  const PagedKvCacheOptions& options() const { return options_; }
  int64_t block_size() const { return options_.block_size; }
  int64_t n_blocks() const { return options_.n_blocks; }
  // Blocks needed to hold `tokens` positions.
  int64_t blocks_for(int64_t tokens) const {
    return (tokens + options_.block_size - 1) / options_.block_size;
  }
  // Bytes of one block over all layers (keys and values).
  size_t block_nbytes() const;

  Tensor& keys(int64_t layer) { return keys_.at(static_cast<size_t>(layer)); }
  Tensor& values(int64_t layer) { return values_.at(static_cast<size_t>(layer)); }
  const Tensor& keys(int64_t layer) const { return keys_.at(static_cast<size_t>(layer)); }
  const Tensor& values(int64_t layer) const { return values_.at(static_cast<size_t>(layer)); }

  // n fresh blocks (reference count 1), or nullopt when fewer than n are free (nothing
  // is taken then). Never-used blocks go first, then evictable cached ones, least
  // recently released first (their keys are forgotten).
  std::optional<std::vector<int32_t>> allocate(int64_t n);
  // Another reference to a block that is in use (prefix sharing).
  void retain(int32_t block);
  // Drops one reference to each block; a block is free again when its count reaches 0.
  void release(std::span<const int32_t> blocks);
  int32_t ref_count(int32_t block) const;
  // Blocks allocate() can hand out (free plus evictable cached blocks).
  int64_t free_blocks() const { return static_cast<int64_t>(free_list_.size()) + evictable_count_; }
  PagedKvCacheStats stats() const;

  // Grows `table` so it covers `tokens` positions. False (table unchanged) when the pool
  // lacks the blocks.
  bool reserve(std::vector<int32_t>& table, int64_t tokens);

  // Writes k, v (f32 [T, n_kv_heads, head_dim]) of positions start_pos .. start_pos+T-1
  // of the sequence with this block table into layer `layer`. The table must cover them.
  void write(int64_t layer, std::span<const int32_t> table, int64_t start_pos, const Tensor& k,
             const Tensor& v);

  // ---- prefix cache ----
  using BlockKey = uint64_t;
  static constexpr BlockKey kRootKey =
      0x5265666974ULL;  // the parent key of a sequence's first block
  // The key of a block holding `tokens` (block_size ids) after the block keyed `parent`.
  static BlockKey block_key(BlockKey parent, std::span<const int32_t> tokens);
  // The cached block holding `tokens` after `parent`, with one more reference taken (an
  // evictable block leaves the LRU list), or nullopt.
  std::optional<int32_t> acquire_cached(BlockKey parent, std::span<const int32_t> tokens);
  // Publishes a full, computed, referenced block under its key. False (nothing changes)
  // when another block already holds that key or this block is already published.
  bool publish(int32_t block, BlockKey parent, std::span<const int32_t> tokens);
  bool is_cached(int32_t block) const;
  // Forgets every key: evictable blocks become free, blocks in use are no longer shared
  // with later sequences (and are freed normally on release). Returns how many keys.
  int64_t drop_prefix_cache();

  // Gives the pool's memory back to the OS (Storage::discard_contents: same addresses,
  // zero pages on the next touch) after dropping the prefix cache. Throws when a block is
  // still referenced. Returns the bytes given back.
  size_t discard_memory();

 private:
  void check_block(int32_t block, const char* what) const;
  void forget(int32_t block);  // drops the block's key (it stays where it is)
  void unlink_evictable(int32_t block);

  struct CachedBlock {
    bool published = false;
    BlockKey key = 0, parent = 0;
    std::vector<int32_t> tokens;  // the block's token ids, compared on lookup
    // Evictable list links (block ids, -1 = none): oldest at lru_head_.
    int32_t prev = -1, next = -1;
    bool evictable = false;
  };
  std::vector<CachedBlock> cached_;
  std::unordered_map<BlockKey, int32_t> by_key_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int64_t evictable_count_ = 0;
  uint64_t evictions_ = 0, dropped_ = 0;

  PagedKvCacheOptions options_;
  std::vector<Tensor> keys_, values_;
  std::vector<int32_t> free_list_;   // LIFO: recently freed blocks are warm in cache
  std::vector<int32_t> ref_counts_;  // per block; 0 = free
};

}  // namespace refit
