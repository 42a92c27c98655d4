// /get_weights_by_name: a checkpoint tensor read back the way the trainer sent it.
//
// Each rank holds a slice of a tensor-parallel weight (a sub-shard: rows or columns of
// the checkpoint tensor); the lead gathers every rank's piece and places it, so the reply
// is the whole tensor under any --tp, not rank 0's shard. A parameter's own name (a
// fused q/k/v or gate/up parameter) has no single checkpoint tensor: that reads back this
// rank's local parameter, and says so.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "weights/shard.h"

namespace refit {

class Engine;

struct WeightPiece {
  int status = 200;        // 404: no such name; 400: stored in a kernel tile layout
  std::string error;       // set when status != 200
  Tensor values;           // this rank's part of the leading rows, f32, contiguous, in the
                           // checkpoint's orientation
  Shape full_shape;        // the whole checkpoint tensor's shape
  std::string dtype;       // the checkpoint's dtype (a quantized weight's values are decoded)
  int64_t split_dim = -1;  // dim of the full tensor this piece is a slice of (-1: whole)
  // Where `values` go along split_dim, in order: one range, or several for a tensor the
  // checkpoint stores fused (Phi-3's qkv_proj under --tp: this rank's q, k and v heads),
  // each cut to the leading rows read.
  std::vector<SliceRange> slices;
  int64_t head_rows = 0;  // leading rows of the full tensor read (all ranks alike)
  std::string sharding;   // the parameter's sharding, for a local-only read ("" otherwise)
};

// This rank's piece of `name` (a checkpoint tensor or a parameter), limited to the
// leading rows of the full tensor that hold its first `wanted` values (the reply is
// truncated, and converting a whole embedding for 100 values would cost ~0.1 s). Call
// with the engine's weights locked for reading.
WeightPiece local_weight_piece(const Engine& engine, const std::string& name, int64_t wanted);

// The leading rows of the full tensor from every rank's piece (pieces[r] from rank r; all
// succeeded): as many rows as the pieces were read with.
Tensor assemble_weight(const std::vector<WeightPiece>& pieces);

}  // namespace refit
