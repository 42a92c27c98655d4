#include "weights/shard.h"

#include "core/error.h"

namespace refit {

Tensor SubShard::slice(const Tensor& full) const {
  if (split_dim < 0) return full;
  return full.narrow(split_dim, slice_start, slice_length);
}

Shape SubShard::local_shape() const {
  Shape s = checkpoint_shape;
  if (split_dim >= 0) s[split_dim] = slice_length;
  return s;
}

std::pair<int64_t, int64_t> split_units(int64_t units, int64_t rank, int64_t world,
                                        const std::string& what) {
  if (world <= 0 || rank < 0 || rank >= world) fail("{}: invalid rank {} of {}", what, rank, world);
  if (units % world == 0) return {rank * (units / world), units / world};
  if (world % units == 0) return {rank / (world / units), 1};  // replicated across ranks
  fail("{}: {} units cannot be split across {} tensor-parallel ranks", what, units, world);
}

}  // namespace refit
