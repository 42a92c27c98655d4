#include "layers/linear.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/matmul_quantized.h"
#include "kernels/ops.h"

namespace refit {
namespace {

// Sources that are row ranges of one checkpoint tensor stored fused (Phi-3's qkv_proj,
// gate_up_proj) become one sub-shard of that tensor, so it loads, refits and reads back as
// the single tensor a trainer sends. Consecutive ranges join into one (at TP=1 the whole
// tensor, replicated); under tensor parallelism each rank takes its heads of q, of k and
// of v, which are apart in the checkpoint and follow one another locally: one sub-shard
// of several ranges.
void merge_fused_checkpoint_rows(std::vector<SubShard>& shards, const std::string& name) {
  std::vector<SubShard> merged;
  for (SubShard& s : shards) {
    if (!merged.empty() && merged.back().checkpoint_name == s.checkpoint_name) {
      SubShard& m = merged.back();
      // Sources of one tensor are listed together, so their local rows follow one another.
      if (m.local_row_offset + m.local_rows != s.local_row_offset)
        fail("{}: rows of the fused checkpoint tensor {} are not consecutive in the parameter",
             name, s.checkpoint_name);
      // The range this source continues: the first, or the last one added.
      int64_t& last_start = m.more_slices.empty() ? m.slice_start : m.more_slices.back().start;
      int64_t& last_length = m.more_slices.empty() ? m.slice_length : m.more_slices.back().length;
      if (last_start + last_length == s.slice_start)
        last_length += s.slice_length;
      else
        m.more_slices.push_back({s.slice_start, s.slice_length});
      m.local_rows += s.local_rows;
      if (m.more_slices.empty() && m.slice_start == 0 && m.slice_length == m.checkpoint_shape[0])
        m.split_dim = -1;
      continue;
    }
    merged.push_back(std::move(s));
  }
  shards = std::move(merged);
}

}  // namespace

Linear Linear::column(ParameterSet& params, const std::string& name,
                      std::vector<LinearSource> sources, int64_t in_features, bool bias,
                      DType dtype, const TensorParallel& tp, bool replicated) {
  Linear l;
  l.style_ = replicated ? ParallelStyle::replicated : ParallelStyle::column;
  l.communicator_ = tp.communicator;
  const int64_t rank = replicated ? 0 : tp.rank(), world = replicated ? 1 : tp.world();
  std::vector<SubShard> weight_shards, bias_shards;
  int64_t offset = 0;
  for (const LinearSource& s : sources) {
    if (s.out_features % s.unit_rows != 0)
      fail("{}: {} rows are not whole units of {}", s.checkpoint_prefix, s.out_features,
           s.unit_rows);
    auto [first_unit, units] =
        split_units(s.out_features / s.unit_rows, rank, world, s.checkpoint_prefix);
    const int64_t start = first_unit * s.unit_rows, rows = units * s.unit_rows;
    const int64_t total = s.checkpoint_rows > 0 ? s.checkpoint_rows : s.out_features;
    const bool whole = world == 1 && s.checkpoint_row0 == 0 && total == s.out_features;
    const int64_t split = whole ? -1 : 0;
    weight_shards.push_back({s.checkpoint_prefix + ".weight",
                             {total, in_features},
                             split,
                             s.checkpoint_row0 + start,
                             rows,
                             offset,
                             rows});
    bias_shards.push_back({s.checkpoint_prefix + ".bias",
                           {total},
                           split,
                           s.checkpoint_row0 + start,
                           rows,
                           offset,
                           rows});
    l.local_rows_.push_back(rows);
    offset += rows;
  }
  merge_fused_checkpoint_rows(weight_shards, name);
  merge_fused_checkpoint_rows(bias_shards, name);
  l.local_out_ = offset;
  l.weight_ = &params.add(std::make_unique<Parameter>(name + ".weight", Shape{offset, in_features},
                                                      dtype, weight_shards, rank, world));
  if (bias)
    l.bias_ = &params.add(std::make_unique<Parameter>(name + ".bias", Shape{offset}, DType::f32,
                                                      bias_shards, rank, world));
  return l;
}

Linear Linear::row(ParameterSet& params, const std::string& name, const std::string& prefix,
                   int64_t in_features, int64_t out_features, int64_t in_unit, bool bias,
                   DType dtype, const TensorParallel& tp) {
  Linear l;
  l.style_ = ParallelStyle::row;
  l.communicator_ = tp.communicator;
  auto [first_unit, units] = split_units(in_features / in_unit, tp.rank(), tp.world(), prefix);
  if (tp.world() > 1 && units * tp.world() != in_features / in_unit)
    fail("{}: row-parallel input of {} features cannot be replicated across {} ranks", prefix,
         in_features, tp.world());
  const int64_t start = first_unit * in_unit, cols = units * in_unit;
  const int64_t split = tp.world() > 1 ? 1 : -1;
  SubShard w{prefix + ".weight", {out_features, in_features}, split, start, cols, 0, out_features};
  l.weight_ =
      &params.add(std::make_unique<Parameter>(name + ".weight", Shape{out_features, cols}, dtype,
                                              std::vector<SubShard>{w}, tp.rank(), tp.world()));
  if (bias)  // replicated: added once, after the all-reduce
    l.bias_ = &params.add(name + ".bias", {out_features}, DType::f32);
  l.local_out_ = out_features;
  l.local_rows_ = {out_features};
  return l;
}

namespace {

// matmul_weight on stored rows: `codes` and `scales` are the weight's (or a row range of them).
void matmul_stored(const Tensor& x, const Parameter& weight, const Tensor& codes,
                   const Tensor& scales, const Tensor& bias, Tensor& out);

}  // namespace

void matmul_weight(const Tensor& x, const Parameter& weight, const Tensor& bias, Tensor& out) {
  if (!weight.quantized()) {
    ops::matmul(x, weight.matmul_view(), bias, out);
    return;
  }
  matmul_stored(x, weight, weight.data(), weight.scale(), bias, out);
}

void matmul_weight_rows(const Tensor& x, const Parameter& weight, int64_t row0, int64_t rows,
                        const Tensor& bias, Tensor& out) {
  if (!weight.transforms().empty())
    fail("{}: a row range needs the plain row layout, not a kernel layout", weight.name());
  if (row0 < 0 || rows < 0 || row0 + rows > weight.local_shape()[0])
    fail("{}: rows {}..{} are outside its {} rows", weight.name(), row0, row0 + rows,
         weight.local_shape()[0]);
  if (!weight.quantized()) {
    ops::matmul(x, weight.data().narrow(0, row0, rows), bias, out);
    return;
  }
  matmul_stored(x, weight, weight.data().narrow(0, row0, rows),
                weight.scale().narrow(0, row0, rows), bias, out);
}

namespace {

void matmul_stored(const Tensor& x, const Parameter& weight, const Tensor& codes,
                   const Tensor& scales, const Tensor& bias, Tensor& out) {
  // Quantized weights: codes + scales; W8A8 quantizes the activations first: FP8 per
  // token to e4m3 (or with the checkpoint's static per-tensor scale), Q8_0 and MXFP4 per block of
  // 32 to int8 (integer dot products).
  Tensor activations = x, activation_scale;
  const QuantScheme& scheme = weight.quantization();
  if (scheme.w8a8 && scheme.int8_activations()) {
    activations = Tensor::empty(x.shape(), DType::i8);
    activation_scale = Tensor::empty({x.size(0), x.size(1) / 32}, DType::f32);
    ops::quantize_per_block_q8(x, activations, activation_scale);
  } else if (scheme.w8a8) {
    activations = Tensor::empty(x.shape(), DType::f8_e4m3fn);
    activation_scale = Tensor::empty({x.size(0)}, DType::f32);
    // Static per-tensor scales (a checkpoint's input_scale; the max over a fused weight's
    // sub-shards) or dynamic per-token ones.
    if (scheme.static_activations)
      ops::quantize_fp8_with_scale(x, weight.static_input_scale(), activations, activation_scale);
    else
      ops::quantize_per_token_fp8(x, activations, activation_scale);
  }
  ops::matmul_quantized(activations, activation_scale, codes, scales, weight.scale_group(), bias,
                        out);
}

}  // namespace

Tensor Linear::forward(const Tensor& x) const {
  // One matmul writes every element (before any all-reduce), so no zero fill first.
  Tensor out =
      Tensor::empty({x.size(0), local_out_}, DType::f32, Device::cpu(), StorageUse::overwritten);
  const bool reduce = style_ == ParallelStyle::row && communicator_->world_size() > 1;
  const Tensor bias = reduce || !bias_ ? Tensor() : bias_->data();
  matmul_weight(x, *weight_, bias, out);
  if (reduce) {
    communicator_->all_reduce_sum(out.data<float>(), static_cast<size_t>(out.numel()));
    if (bias_) {
      Tensor b = bias_->data();
      for (int64_t t = 0; t < out.size(0); ++t) {
        Tensor row = out.select(0, t);
        ops::add(row, b, row);
      }
    }
  }
  return out;
}

}  // namespace refit
