// How a parameter is split across tensor-parallel ranks and, for fused parameters
// (q/k/v, gate/up), which rows come from which checkpoint tensor.
//
// The local (this rank's) parameter, before any layout transform, is the concatenation
// along dim 0 of its sub-shards' slices. A sub-shard's slice is the range
// [slice_start, slice_start + slice_length) of its checkpoint tensor along `split_dim`
// (-1: the whole tensor, replicated on every rank).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace refit {

struct SubShard {
  std::string checkpoint_name;  // "model.layers.0.self_attn.k_proj.weight"
  Shape checkpoint_shape;       // full shape, as a trainer sends it
  int64_t split_dim = -1;       // dim of the checkpoint tensor split across ranks
  int64_t slice_start = 0;
  int64_t slice_length = 0;     // along split_dim (unused when replicated)
  int64_t local_row_offset = 0; // first row of this sub-shard in the local parameter
  int64_t local_rows = 0;

  // This rank's slice of a full checkpoint tensor (a view, no copy).
  Tensor slice(const Tensor& full) const;
  // Rows/columns this sub-shard contributes locally, as a shape.
  Shape local_shape() const;
};

// Splits `units` units (heads, or single rows) of `unit_size` rows among `world` ranks:
// each rank gets units/world consecutive units; when world > units and world % units
// == 0 (more ranks than KV heads), ranks share units, each holding one whole unit.
// Returns {first unit, unit count} for `rank`; throws when neither divides.
std::pair<int64_t, int64_t> split_units(int64_t units, int64_t rank, int64_t world,
                                        const std::string& what);

}  // namespace refit
