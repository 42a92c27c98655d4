// How a parameter is split across tensor-parallel ranks and, for fused parameters
// (q/k/v, gate/up), which rows come from which checkpoint tensor.
//
// The local (this rank's) parameter, before any layout transform, is the concatenation
// along dim 0 of its sub-shards' slices. A sub-shard is ONE checkpoint tensor: its slice
// is the range [slice_start, slice_start + slice_length) of that tensor along `split_dim`
// (-1: the whole tensor, replicated on every rank), followed, for a tensor the checkpoint
// stores fused and tensor parallelism splits (Phi-3's qkv_proj at --tp 2: this rank's q
// heads, then its k heads, then its v heads), by further ranges along dim 0. Every range
// lands right after the one before in local rows, so a sub-shard always fills one
// consecutive block [local_row_offset, local_row_offset + local_rows) and stays the one
// entry per checkpoint name that loaders, refit and export look up (ParameterSet::target).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace refit {

// A range [start, start + length) of a checkpoint tensor along a sub-shard's split_dim.
struct SliceRange {
  int64_t start = 0;
  int64_t length = 0;
  bool operator==(const SliceRange&) const = default;
};

struct SubShard {
  std::string checkpoint_name;   // "model.layers.0.self_attn.k_proj.weight"
  Shape checkpoint_shape;        // full shape, as a trainer sends it
  int64_t split_dim = -1;        // dim of the checkpoint tensor split across ranks
  int64_t slice_start = 0;       // the (first) range along split_dim
  int64_t slice_length = 0;      // (unused when replicated)
  int64_t local_row_offset = 0;  // first row of this sub-shard in the local parameter
  int64_t local_rows = 0;
  // Ranges after the first, in local row order (split_dim 0 only); empty for one range.
  std::vector<SliceRange> more_slices = {};

  // Every range along split_dim in local row order (none when replicated).
  std::vector<SliceRange> slices() const;
  // This rank's slice of a full checkpoint tensor: a view for one range (no copy); for
  // several, their rows concatenated into a new contiguous tensor of full's dtype.
  Tensor slice(const Tensor& full) const;
  // Rows/columns this sub-shard contributes locally, as a shape.
  Shape local_shape() const;
  // "0..32" or "0..16, 32..40, 48..56": the ranges along split_dim, for messages.
  std::string slices_str() const;
};

// Splits `units` units (heads, or single rows) of `unit_size` rows among `world` ranks:
// each rank gets units/world consecutive units; when world > units and world % units
// == 0 (more ranks than KV heads), ranks share units, each holding one whole unit.
// Returns {first unit, unit count} for `rank`; throws when neither divides.
std::pair<int64_t, int64_t> split_units(int64_t units, int64_t rank, int64_t world,
                                        const std::string& what);

}  // namespace refit
