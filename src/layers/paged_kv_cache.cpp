#include "layers/paged_kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/host_buffer_cache.h"

namespace refit {

PagedKvCache::PagedKvCache(const PagedKvCacheOptions& o) : options_(o) {
  if (o.n_layers <= 0 || o.n_kv_heads <= 0 || o.head_dim <= 0)
    fail("paged KV cache: n_layers ({}), n_kv_heads ({}) and head_dim ({}) must be positive",
         o.n_layers, o.n_kv_heads, o.head_dim);
  if (o.block_size <= 0) fail("paged KV cache: block_size must be positive, got {}", o.block_size);
  if (o.n_blocks <= 0 || o.n_blocks > INT32_MAX)
    fail("paged KV cache: n_blocks must be in 1..{}, got {}", INT32_MAX, o.n_blocks);
  // Stored head-major, [n_blocks, n_kv_heads, block_size, head_dim], and seen through a
  // permuted view as [n_blocks, block_size, n_kv_heads, head_dim]: attention reads one kv
  // head's rows in order, which are then one run of block_size x head_dim floats instead
  // of head_dim floats every n_kv_heads x head_dim (the hardware prefetcher follows a run;
  // attention was a tenth of a serving step of the 110M model at 32 clients, latency-bound
  // on those scattered rows). The kernels take the strides, so the arithmetic is the same.
  const Shape storage_shape{o.n_blocks, o.n_kv_heads, o.block_size, o.head_dim};
  for (int64_t l = 0; l < o.n_layers; ++l) {
    keys_.push_back(Tensor::empty(storage_shape, DType::f32).permute({0, 2, 1, 3}));
    values_.push_back(Tensor::empty(storage_shape, DType::f32).permute({0, 2, 1, 3}));
  }
  ref_counts_.assign(static_cast<size_t>(o.n_blocks), 0);
  cached_.resize(static_cast<size_t>(o.n_blocks));
  free_list_.reserve(static_cast<size_t>(o.n_blocks));
  // Block 0 ends on top of the stack so the first allocations are 0, 1, 2, ...
  for (int64_t b = o.n_blocks - 1; b >= 0; --b) free_list_.push_back(static_cast<int32_t>(b));
}

size_t PagedKvCache::discard_memory() {
  drop_prefix_cache();
  for (int64_t b = 0; b < options_.n_blocks; ++b)
    if (ref_counts_[static_cast<size_t>(b)] > 0)
      fail("paged KV cache: block {} is still in use; its memory cannot be released", b);
  size_t bytes = 0;
  for (auto* pool : {&keys_, &values_})
    for (Tensor& t : *pool) bytes += t.storage()->discard_contents();
  return bytes + host_buffer_cache::release_all();
}

size_t PagedKvCache::block_nbytes() const {
  return static_cast<size_t>(2 * options_.n_layers * options_.block_size * options_.n_kv_heads *
                             options_.head_dim) *
         sizeof(float);
}

void PagedKvCache::check_block(int32_t block, const char* what) const {
  if (block < 0 || block >= options_.n_blocks)
    fail("paged KV cache: {} of block {} outside the pool of {} blocks", what, block,
         options_.n_blocks);
}

std::optional<std::vector<int32_t>> PagedKvCache::allocate(int64_t n) {
  if (n < 0) fail("paged KV cache: cannot allocate {} blocks", n);
  if (n > free_blocks()) return std::nullopt;
  std::vector<int32_t> blocks;
  blocks.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int32_t b;
    if (!free_list_.empty()) {
      b = free_list_.back();
      free_list_.pop_back();
    } else {
      // Evict the least recently released cached block: its key goes, its rows are reused.
      b = lru_head_;
      unlink_evictable(b);
      forget(b);
      ++evictions_;
    }
    ref_counts_[static_cast<size_t>(b)] = 1;
    blocks.push_back(b);
  }
  return blocks;
}

void PagedKvCache::retain(int32_t block) {
  check_block(block, "retain");
  int32_t& count = ref_counts_[static_cast<size_t>(block)];
  if (count <= 0) fail("paged KV cache: retain of free block {}", block);
  ++count;
}

void PagedKvCache::release(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    check_block(b, "release");
    int32_t& count = ref_counts_[static_cast<size_t>(b)];
    // A double free is a scheduler bug; refusing it keeps the free list sound.
    if (count <= 0) fail("paged KV cache: release of free block {}", b);
    if (--count > 0) continue;
    CachedBlock& c = cached_[static_cast<size_t>(b)];
    if (!c.published) {
      free_list_.push_back(b);
      continue;
    }
    // Still worth a hit: park it as the most recently released evictable block.
    c.evictable = true;
    c.prev = lru_tail_;
    c.next = -1;
    if (lru_tail_ >= 0)
      cached_[static_cast<size_t>(lru_tail_)].next = b;
    else
      lru_head_ = b;
    lru_tail_ = b;
    ++evictable_count_;
  }
}

int32_t PagedKvCache::ref_count(int32_t block) const {
  check_block(block, "ref_count");
  return ref_counts_[static_cast<size_t>(block)];
}

PagedKvCacheStats PagedKvCache::stats() const {
  PagedKvCacheStats s;
  s.total_blocks = options_.n_blocks;
  s.free_blocks = free_blocks();
  s.used_blocks = s.total_blocks - s.free_blocks;
  s.block_size = options_.block_size;
  s.cached_blocks = static_cast<int64_t>(by_key_.size());
  s.evictable_blocks = evictable_count_;
  s.evictions = evictions_;
  s.dropped = dropped_;
  return s;
}

// ---- prefix cache ----

namespace {
uint64_t mix64(uint64_t x) {  // splitmix64's finaliser: every input bit moves every output bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}
}  // namespace

PagedKvCache::BlockKey PagedKvCache::block_key(BlockKey parent, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ULL);
  for (int32_t t : tokens)
    h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ULL));
  h = mix64(h ^ tokens.size());
  return h == kRootKey ? h + 1 : h;  // a block's key is never the root's
}

void PagedKvCache::unlink_evictable(int32_t block) {
  CachedBlock& c = cached_[static_cast<size_t>(block)];
  if (!c.evictable) fail("paged KV cache: block {} is not evictable", block);
  if (c.prev >= 0)
    cached_[static_cast<size_t>(c.prev)].next = c.next;
  else
    lru_head_ = c.next;
  if (c.next >= 0)
    cached_[static_cast<size_t>(c.next)].prev = c.prev;
  else
    lru_tail_ = c.prev;
  c.prev = c.next = -1;
  c.evictable = false;
  --evictable_count_;
}

void PagedKvCache::forget(int32_t block) {
  CachedBlock& c = cached_[static_cast<size_t>(block)];
  if (!c.published) return;
  by_key_.erase(c.key);
  c.published = false;
  c.key = c.parent = 0;
  c.tokens.clear();
}

std::optional<int32_t> PagedKvCache::acquire_cached(BlockKey parent,
                                                    std::span<const int32_t> tokens) {
  if (static_cast<int64_t>(tokens.size()) != options_.block_size) return std::nullopt;
  auto it = by_key_.find(block_key(parent, tokens));
  if (it == by_key_.end()) return std::nullopt;
  const int32_t b = it->second;
  const CachedBlock& c = cached_[static_cast<size_t>(b)];
  // A 64-bit collision must not hand out another prefix's k/v.
  if (c.parent != parent ||
      !std::equal(c.tokens.begin(), c.tokens.end(), tokens.begin(), tokens.end()))
    return std::nullopt;
  int32_t& count = ref_counts_[static_cast<size_t>(b)];
  if (count == 0) unlink_evictable(b);
  ++count;
  return b;
}

bool PagedKvCache::publish(int32_t block, BlockKey parent, std::span<const int32_t> tokens) {
  check_block(block, "publish");
  if (static_cast<int64_t>(tokens.size()) != options_.block_size)
    fail("paged KV cache: publish of block {} with {} tokens; only full blocks of {} are cached",
         block, tokens.size(), options_.block_size);
  if (ref_counts_[static_cast<size_t>(block)] <= 0)
    fail("paged KV cache: publish of free block {}", block);
  CachedBlock& c = cached_[static_cast<size_t>(block)];
  if (c.published) return false;
  const BlockKey key = block_key(parent, tokens);
  if (!by_key_.emplace(key, block).second) return false;
  c.published = true;
  c.key = key;
  c.parent = parent;
  c.tokens.assign(tokens.begin(), tokens.end());
  return true;
}

bool PagedKvCache::is_cached(int32_t block) const {
  check_block(block, "is_cached");
  return cached_[static_cast<size_t>(block)].published;
}

int64_t PagedKvCache::drop_prefix_cache() {
  std::vector<int32_t> blocks;
  blocks.reserve(by_key_.size());
  for (const auto& [key, b] : by_key_) blocks.push_back(b);
  for (int32_t b : blocks) {
    if (cached_[static_cast<size_t>(b)].evictable) {
      unlink_evictable(b);
      free_list_.push_back(b);
    }
    forget(b);
  }
  dropped_ += blocks.size();
  return static_cast<int64_t>(blocks.size());
}

bool PagedKvCache::reserve(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t need = blocks_for(tokens) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  auto blocks = allocate(need);
  if (!blocks) return false;
  table.insert(table.end(), blocks->begin(), blocks->end());
  return true;
}

void PagedKvCache::write(int64_t layer, std::span<const int32_t> table, int64_t start_pos,
                         const Tensor& k, const Tensor& v) {
  const PagedKvCacheOptions& o = options_;
  if (layer < 0 || layer >= o.n_layers) fail("paged KV cache: layer {} of {}", layer, o.n_layers);
  const Shape want_tail{o.n_kv_heads, o.head_dim};
  for (const Tensor* t : {&k, &v}) {
    if (t->dtype() != DType::f32 || t->dim() != 3 || t->size(1) != o.n_kv_heads ||
        t->size(2) != o.head_dim || !t->is_contiguous())
      fail("paged KV cache: write needs contiguous f32 [T, {}, {}], got {}", o.n_kv_heads,
           o.head_dim, t->str());
  }
  if (k.size(0) != v.size(0)) fail("paged KV cache: k has {} rows, v {}", k.size(0), v.size(0));
  const int64_t T = k.size(0);
  if (start_pos < 0 || blocks_for(start_pos + T) > static_cast<int64_t>(table.size()))
    fail("paged KV cache: positions {}..{} exceed the sequence's {} blocks of {}", start_pos,
         start_pos + T - 1, table.size(), o.block_size);
  const int64_t row = o.n_kv_heads * o.head_dim;
  const size_t head_bytes = static_cast<size_t>(o.head_dim) * sizeof(float);
  float* kp = keys_[static_cast<size_t>(layer)].data<float>();
  float* vp = values_[static_cast<size_t>(layer)].data<float>();
  const float* ks = k.data<const float>();
  const float* vs = v.data<const float>();
  // Pool strides (head-major storage, see the constructor): block, row, head.
  const Tensor& pool = keys_[static_cast<size_t>(layer)];
  const int64_t sb = pool.stride(0), sr = pool.stride(1), sh = pool.stride(2);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = start_pos + t;
    const int32_t block = table[static_cast<size_t>(p / o.block_size)];
    check_block(block, "write");
    const int64_t at = static_cast<int64_t>(block) * sb + (p % o.block_size) * sr;
    for (int64_t h = 0; h < o.n_kv_heads; ++h) {
      std::memcpy(kp + at + h * sh, ks + t * row + h * o.head_dim, head_bytes);
      std::memcpy(vp + at + h * sh, vs + t * row + h * o.head_dim, head_bytes);
    }
  }
}

}  // namespace refit
