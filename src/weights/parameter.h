// A model parameter: owned by its layer for the engine's life and never replaced
// (law L2). Its storage is allocated once; every load converts, slices and transforms
// the incoming checkpoint tensor and writes it into that same storage, so the address
// is stable across any number of reloads and captured kernel graphs stay valid.
//
// What it records, so that a reload is exact:
//  * its sub-shards: which checkpoint tensor fills which rows (fused q/k/v and gate/up
//    have several; each stored byte derives from exactly one of them),
//  * its tensor-parallel slice of each (rank, world, split dim),
//  * the ordered layout transforms applied after loading (transpose, tile shuffle),
//  * its quantization scheme, if any: every load quantizes the incoming rows (one
//    sub-shard's, so scales never mix checkpoint tensors) before the layout transforms,
//    and the scales live in a second storage owned here, address-stable like the codes.
// The loader is this class's load(): data on the parameter, not an attribute that a
// post-processing step can drop (seed 001).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/quant/quant_scheme.h"
#include "weights/layout_transform.h"
#include "weights/shard.h"

namespace refit {

struct BlockCodes;

class Parameter {
 public:
  // A parameter of local (this rank's, untransformed) shape `local_shape` filled from
  // `sub_shards` (rows concatenated along dim 0), stored in `stored_dtype`.
  Parameter(std::string name, Shape local_shape, DType stored_dtype,
            std::vector<SubShard> sub_shards, int64_t rank = 0, int64_t world = 1);
  // Convenience: an unfused, replicated parameter whose checkpoint tensor has its name.
  Parameter(std::string name, Shape shape, DType stored_dtype);
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  const std::string& name() const { return name_; }
  // Full (unsharded) shape of the parameter as a trainer sees it: for unfused ones the
  // checkpoint shape; for fused ones the concatenated checkpoint shapes.
  const Shape& logical_shape() const { return logical_shape_; }
  const Shape& local_shape() const { return local_shape_; }
  DType dtype() const { return data_.dtype(); }  // stored dtype (codes when quantized)
  // What the parameter holds before quantization (what it would store unquantized).
  DType logical_dtype() const { return quant_.enabled() ? logical_dtype_ : data_.dtype(); }
  int64_t rank() const { return rank_; }
  int64_t world() const { return world_; }
  // The dim of the *stored* tensor along which rows (sub-shards, TP slices) run:
  // 0, or 1 after a transpose.
  int64_t row_dim() const { return transposed() ? 1 : 0; }
  const std::vector<SubShard>& sub_shards() const { return sub_shards_; }
  const SubShard* find_sub_shard(const std::string& checkpoint_name) const;
  const std::vector<LayoutTransform>& transforms() const { return transforms_; }
  bool transposed() const;
  // "replicated", or per sub-shard its local rows and the ranges of its checkpoint tensor:
  // "rank 1 of 2, row dim 0: rows 0..64 <- ...qkv_proj.weight[dim 0: 64..128, 160..192, 224..256]"
  std::string sharding_str() const;

  // The stored tensor (read-only to the outside; exported through DLPack as is).
  const Tensor& data() const { return data_; }
  // The weight as kernels take it: [out, in] logical orientation (a transposed view
  // when stored transposed), layout tag kept.
  Tensor matmul_view() const;

  // Throws (naming this parameter and the checkpoint tensor, expected and actual) unless
  // `full` can be loaded as `sub_shard`; writes nothing. check_finite scans the values.
  void check_loadable(const SubShard& sub_shard, const Tensor& full,
                      bool check_finite = false) const;
  // The same checks from a declared shape, dtype and device (for tensors produced later).
  void check_declared(const SubShard& sub_shard, const Shape& shape, DType dtype,
                      Device device) const;
  // check_loadable, then slice, convert, re-apply the recorded transforms and write the
  // rows of `sub_shard` in place.
  void load(const SubShard& sub_shard, const Tensor& full);
  // For unfused parameters: load the single sub-shard.
  void load(const Tensor& full);

  // ---- quantization ----
  // Makes this parameter store `scheme`'s codes [rows, K] and scales [rows, S]. Part of
  // creating it: refused once anything was loaded or transformed (the storage is
  // allocated here, once, and never moves afterwards).
  void set_quantization(const QuantScheme& scheme);
  // "" when `scheme` fits this parameter now, else why not.
  std::string quantization_unsupported_reason(const QuantScheme& scheme) const;
  const QuantScheme& quantization() const { return quant_; }
  bool quantized() const { return quant_.enabled(); }
  // The scales [local rows, S] (undefined unless quantized): read-only, exportable.
  const Tensor& scale() const { return scale_; }
  // Pre-quantized FP8 codes stored as they are, not re-quantized (parameter_codes.cpp):
  // `codes` f8_e4m3fn of the sub-shard's checkpoint shape and `scales` f32 [checkpoint rows,
  // S] in the scheme's per-row form (S = scale_cols of the checkpoint's K), from a checkpoint
  // quantized with `stored`, which must be this parameter's FP8 method (the granularity a
  // later re-quantization from floats computes, so a refit from bf16 equals a fresh load of
  // the checkpoint holding those values quantized). This rank's rows and columns are sliced
  // as load() slices values; the recorded kernel layout is re-applied. check_codes_loadable
  // throws (naming the tensor) unless they fit; writes nothing.
  void check_codes_loadable(const SubShard& sub_shard, const Tensor& codes, const Tensor& scales,
                            QuantMethod stored, bool check_finite = false) const;
  void load_codes(const SubShard& sub_shard, const Tensor& codes, const Tensor& scales,
                  QuantMethod stored);
  // Q8_0 or MXFP4 codes and scales a checkpoint holds (weights/block_codes.h), stored as they
  // are: the file's bytes, in the recorded kernel layout. block_codes_unsupported_reason is ""
  // when `codes` can fill `sub_shard` so (this parameter's method, the checkpoint tensor's
  // shape, this rank's columns whole blocks of 32), else why not: the caller then loads the
  // decoded values instead, which give the same values.
  std::string block_codes_unsupported_reason(const SubShard& sub_shard,
                                             const BlockCodes& codes) const;
  void load_block_codes(const SubShard& sub_shard, const BlockCodes& codes);
  // Columns sharing one scale (quantized only).
  int64_t scale_group() const { return quant_.group(local_shape_.back()); }
  // The values a quantized parameter computes with: f32 [rows, K] for local rows
  // [row0, row0 + rows) (all of them by default) in plain row order, its codes and scales
  // put back from any kernel layout and decoded. A copy, for export (state_dict,
  // /get_weights_by_name): what a trainer sees is what is served.
  Tensor dequantized(int64_t row0 = 0, int64_t rows = -1) const;

  // ---- static activation scales (W8A8 FP8 with input_scale) ----
  // Marks a one-value f32 [1] parameter as a scale a checkpoint stores beside a weight (its
  // `input_scale`): the tensor may come as [1] or as a scalar [] (both appear on the Hub),
  // and every load or staged update checks its value is finite and > 0, whatever
  // UpdateOptions::check_finite says (a zero, negative or NaN scale would serve garbage
  // without an error).
  void set_positive_scale() { positive_scale_ = true; }
  bool positive_scale() const { return positive_scale_; }
  // The input scales of a weight whose scheme has static_activations: one parameter per
  // sub-shard (q, k and v each keep the scale their checkpoint tensor has, so refit names map
  // 1:1), owned by the same ParameterSet. static_input_scale() is their max, read at every
  // matmul: vLLM's process_weights_after_loading takes the same max once, after loading.
  void set_input_scales(std::vector<const Parameter*> scales) { input_scales_ = std::move(scales); }
  const std::vector<const Parameter*>& input_scales() const { return input_scales_; }
  float static_input_scale() const;

  // Applies a layout transform to the stored contents in place and records it. Throws
  // (changing nothing) when the transform does not fit the shape, or when it is
  // already applied and not idempotent.
  void apply_transform(LayoutTransform t);
  // "" when `t` can be applied now, else why not.
  std::string transform_unsupported_reason(LayoutTransform t) const;

 private:
  // `rows` (already sliced and converted, plain layout [n, K]) in the stored form.
  Tensor transformed(const Tensor& rows) const;
  // Refuses (at creation) a sub-shard of several ranges that could not be loaded exactly.
  void check_ranges(const SubShard& sub_shard) const;
  // `sub_shard`'s slice of `full` converted into `dst` (its local shape, plain layout).
  void copy_slices(const SubShard& sub_shard, const Tensor& full, Tensor dst) const;
  Tensor writable() const;
  // Quantized load of one sub-shard's rows (f32 [n, K]), and a kernel layout (shuffle or
  // interleave) applied in place to the codes (and, for the shuffle, scales) already held.
  void load_quantized(const SubShard& sub_shard, const Tensor& rows);
  void relayout_quantized(LayoutTransform t);
  // Rows [first, first + count) of a quantized parameter's codes as a u8 [count, row bytes]
  // view of the storage, tagged strided whatever order the bytes are in.
  Tensor code_bytes(int64_t first, int64_t count) const;

  std::string name_;
  Shape logical_shape_;
  Shape local_shape_;
  std::vector<SubShard> sub_shards_;
  int64_t rank_ = 0, world_ = 1;
  std::vector<LayoutTransform> transforms_;
  Tensor data_;
  QuantScheme quant_;
  DType logical_dtype_ = DType::f32;
  Tensor scale_;
  bool loaded_ = false;
  bool positive_scale_ = false;
  std::vector<const Parameter*> input_scales_;
};

}  // namespace refit
