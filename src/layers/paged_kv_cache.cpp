#include "layers/paged_kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace refit {

PagedKvCache::PagedKvCache(const PagedKvCacheOptions& o) : options_(o) {
  if (o.n_layers <= 0 || o.n_kv_heads <= 0 || o.head_dim <= 0)
    fail("paged KV cache: n_layers ({}), n_kv_heads ({}) and head_dim ({}) must be positive",
         o.n_layers, o.n_kv_heads, o.head_dim);
  if (o.block_size <= 0) fail("paged KV cache: block_size must be positive, got {}", o.block_size);
  if (o.n_blocks <= 0 || o.n_blocks > INT32_MAX)
    fail("paged KV cache: n_blocks must be in 1..{}, got {}", INT32_MAX, o.n_blocks);
  const Shape shape{o.n_blocks, o.block_size, o.n_kv_heads, o.head_dim};
  for (int64_t l = 0; l < o.n_layers; ++l) {
    keys_.push_back(Tensor::empty(shape, DType::f32));
    values_.push_back(Tensor::empty(shape, DType::f32));
  }
  ref_counts_.assign(static_cast<size_t>(o.n_blocks), 0);
  free_list_.reserve(static_cast<size_t>(o.n_blocks));
  // Block 0 ends on top of the stack so the first allocations are 0, 1, 2, ...
  for (int64_t b = o.n_blocks - 1; b >= 0; --b) free_list_.push_back(static_cast<int32_t>(b));
}

size_t PagedKvCache::block_nbytes() const {
  return static_cast<size_t>(2 * options_.n_layers * options_.block_size * options_.n_kv_heads *
                             options_.head_dim) * sizeof(float);
}

void PagedKvCache::check_block(int32_t block, const char* what) const {
  if (block < 0 || block >= options_.n_blocks)
    fail("paged KV cache: {} of block {} outside the pool of {} blocks", what, block, options_.n_blocks);
}

std::optional<std::vector<int32_t>> PagedKvCache::allocate(int64_t n) {
  if (n < 0) fail("paged KV cache: cannot allocate {} blocks", n);
  if (n > free_blocks()) return std::nullopt;
  std::vector<int32_t> blocks;
  blocks.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = free_list_.back();
    free_list_.pop_back();
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
    if (--count == 0) free_list_.push_back(b);
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
  return s;
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
  const size_t row_bytes = static_cast<size_t>(row) * sizeof(float);
  float* kp = keys_[static_cast<size_t>(layer)].data<float>();
  float* vp = values_[static_cast<size_t>(layer)].data<float>();
  const float* ks = k.data<const float>();
  const float* vs = v.data<const float>();
  // Rows of one block are contiguous: copy runs of them at once.
  int64_t t = 0;
  while (t < T) {
    const int64_t p = start_pos + t;
    const int32_t block = table[static_cast<size_t>(p / o.block_size)];
    check_block(block, "write");
    const int64_t in_block = p % o.block_size;
    const int64_t run = std::min(T - t, o.block_size - in_block);
    const int64_t dst = (static_cast<int64_t>(block) * o.block_size + in_block) * row;
    std::memcpy(kp + dst, ks + t * row, static_cast<size_t>(run) * row_bytes);
    std::memcpy(vp + dst, vs + t * row, static_cast<size_t>(run) * row_bytes);
    t += run;
  }
}

}  // namespace refit
