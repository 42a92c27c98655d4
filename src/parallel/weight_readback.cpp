#include "parallel/weight_readback.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "runtime/engine.h"
#include "weights/layout_transform.h"

namespace refit {

namespace {

// A stacked form (HF gpt-oss's `mlp.experts.gate_up_proj`) read back in its own layout,
// put together from the per-expert tensors it holds: only the leading experts holding the
// first `wanted` values.
WeightPiece stacked_weight_piece(const Engine& engine, const CheckpointAlias& alias,
                                 int64_t wanted) {
  WeightPiece piece;
  if (engine.world_size() > 1) {  // each rank holds a slice of every part, or some experts
    piece.status = 400;
    piece.error = fmt::format(
        "'{}' is a stacked form; under tensor parallelism read its per-expert tensors "
        "('{}', ...)",
        alias.name, alias.parts.empty() ? std::string() : alias.parts.front().name);
    return piece;
  }
  if (alias.form != AliasForm::values) {
    piece.status = 400;
    piece.error = fmt::format("'{}' is MXFP4 codes; read '{}' for the values", alias.name,
                              alias.name.substr(0, alias.name.rfind('_')));
    return piece;
  }
  const int64_t experts = alias.shape[0];
  int64_t per_expert = 1;
  for (size_t d = 1; d < alias.shape.size(); ++d) per_expert *= alias.shape[d];
  wanted = std::max<int64_t>(wanted, 0);
  const int64_t head =
      per_expert > 0 ? std::min(experts, wanted / per_expert + (wanted % per_expert != 0)) : 0;
  Shape shape = alias.shape;
  shape[0] = head;
  Tensor out = Tensor::zeros(shape, DType::f32);
  for (const AliasPart& part : alias.parts) {
    if (part.index >= head) continue;
    WeightPiece one = local_weight_piece(engine, part.name, std::numeric_limits<int64_t>::max());
    if (one.status != 200) return one;
    if (piece.dtype.empty()) piece.dtype = one.dtype;
    alias_part_view(part, out).copy_from(one.values);
  }
  if (piece.dtype.empty()) piece.dtype = "f32";
  piece.values = out;
  piece.full_shape = alias.shape;
  piece.head_rows = head;
  return piece;
}

}  // namespace

WeightPiece local_weight_piece(const Engine& engine, const std::string& name, int64_t wanted) {
  WeightPiece piece;
  const ParameterSet& params = engine.model().parameters();
  if (const CheckpointAlias* alias = params.alias(name))
    return stacked_weight_piece(engine, *alias, wanted);
  CheckpointTarget target = params.target(name);
  Parameter* p = target.parameter ? target.parameter : params.find(name);
  if (!p) {
    piece.status = 404;
    piece.error = fmt::format("no parameter or checkpoint tensor named '{}'", name);
    return piece;
  }
  // A quantized weight reads as the values it computes with (decoded, in plain order,
  // whatever kernel layout holds its codes, below); its dtype is the checkpoint's.
  if (!p->quantized())
    for (LayoutTransform tr : p->transforms())
      if (tr != LayoutTransform::transpose) {
        piece.status = 400;
        piece.error = fmt::format(
            "'{}' is stored in a kernel tile layout; read it with a plain layout", name);
        return piece;
      }
  Tensor t = p->data();  // quantized: the codes, for their rows' shape and position only
  if (p->transposed()) t = t.transpose(0, 1);
  piece.dtype = std::string(dtype_name(p->logical_dtype()));
  int64_t row0 = 0;  // t's first row among the parameter's
  if (target.sub_shard) {
    const SubShard& s = *target.sub_shard;
    t = t.narrow(0, s.local_row_offset, s.local_rows);
    row0 = s.local_row_offset;
    piece.full_shape = s.checkpoint_shape;
    piece.split_dim = s.split_dim;
    piece.slices = s.slices();
  } else {
    piece.full_shape = t.shape();
    if (engine.world_size() > 1) piece.sharding = p->sharding_str();
  }
  // Leading rows of the full tensor holding the first `wanted` values, and this piece's share.
  const int64_t full_rows = piece.full_shape.empty() ? 1 : piece.full_shape[0];
  int64_t cols = 1;
  for (size_t d = 1; d < piece.full_shape.size(); ++d) cols *= piece.full_shape[d];
  wanted = std::max<int64_t>(wanted, 0);
  piece.head_rows =
      cols > 0 ? std::min(full_rows, wanted / cols + (wanted % cols != 0)) : full_rows;
  if (t.dim() == 0) {
    piece.values = Tensor::from_floats(t.shape(), t.to_floats());
    return piece;
  }
  // The local rows to read, as (first local row, count): split by rows, each range's rows
  // that fall within the leading ones (a range wholly past them is dropped); otherwise the
  // leading rows themselves.
  std::vector<std::pair<int64_t, int64_t>> parts;
  if (piece.split_dim == 0) {
    std::vector<SliceRange> kept;
    int64_t local = 0;
    for (const SliceRange& r : piece.slices) {
      const int64_t n = std::clamp<int64_t>(piece.head_rows - r.start, 0, r.length);
      if (n > 0) {
        parts.push_back({local, n});
        kept.push_back({r.start, n});
      }
      local += r.length;
    }
    piece.slices = std::move(kept);
  } else {
    parts.push_back({0, std::min(piece.head_rows, t.size(0))});
  }
  Shape shape = t.shape();
  shape[0] = 0;
  std::vector<float> values;
  for (auto [local, n] : parts) {
    const Tensor rows = p->quantized() ? p->dequantized(row0 + local, n) : t.narrow(0, local, n);
    const std::vector<float> f = rows.to_floats();
    values.insert(values.end(), f.begin(), f.end());
    shape[0] += n;
  }
  piece.values = Tensor::from_floats(shape, values);
  return piece;
}

Tensor assemble_weight(const std::vector<WeightPiece>& pieces) {
  if (pieces.empty()) fail("assemble_weight: no pieces");
  const WeightPiece& first = pieces.front();
  if (first.split_dim < 0) return first.values;  // replicated, or a local-only read
  Shape head = first.full_shape;
  head[0] = first.head_rows;
  Tensor full = Tensor::zeros(head, DType::f32);
  for (const WeightPiece& piece : pieces) {
    if (piece.values.numel() == 0) continue;  // none of the leading rows are this rank's
    const int64_t dim = piece.split_dim;
    int64_t taken = 0;  // of the piece's values along dim
    for (const SliceRange& r : piece.slices) {
      if (dim != first.split_dim || r.start < 0 || r.length < 0 ||
          r.start + r.length > full.size(dim) || taken + r.length > piece.values.size(dim) ||
          (dim != 0 && piece.values.size(0) != full.size(0)))
        fail("assemble_weight: a rank's slice [{}, {}) along dim {} does not fit {}", r.start,
             r.start + r.length, dim, shape_str(head));
      Tensor dst = full.narrow(dim, r.start, r.length);
      dst.copy_from(piece.values.narrow(dim, taken, r.length));
      taken += r.length;
    }
    if (taken != piece.values.size(dim))
      fail("assemble_weight: a rank's ranges hold {} of its {} values along dim {}", taken,
           piece.values.size(dim), dim);
  }
  return full;
}

}  // namespace refit
