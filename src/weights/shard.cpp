#include "weights/shard.h"

#include "core/error.h"

namespace refit {

std::vector<SliceRange> SubShard::slices() const {
  if (split_dim < 0) return {};
  std::vector<SliceRange> out{{slice_start, slice_length}};
  out.insert(out.end(), more_slices.begin(), more_slices.end());
  return out;
}

Tensor SubShard::slice(const Tensor& full) const {
  if (split_dim < 0) return full;
  if (more_slices.empty()) return full.narrow(split_dim, slice_start, slice_length);
  Tensor out = Tensor::empty(local_shape(), full.dtype());
  int64_t row = 0;
  for (const SliceRange& r : slices()) {
    out.narrow(split_dim, row, r.length).copy_from(full.narrow(split_dim, r.start, r.length));
    row += r.length;
  }
  return out;
}

Shape SubShard::local_shape() const {
  Shape s = checkpoint_shape;
  if (split_dim < 0) return s;
  s[split_dim] = slice_length;
  for (const SliceRange& r : more_slices) s[split_dim] += r.length;
  return s;
}

std::string SubShard::slices_str() const {
  std::string s;
  for (const SliceRange& r : slices())
    s += fmt::format("{}{}..{}", s.empty() ? "" : ", ", r.start, r.start + r.length);
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
