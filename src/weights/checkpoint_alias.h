// A checkpoint tensor that holds several of the parameters' checkpoint tensors in another
// form. Hugging Face's gpt-oss stacks a layer's experts:
//   mlp.experts.gate_up_proj         [E, dim, 2I]  stored for x @ W; gate = even columns
//   mlp.experts.gate_up_proj_bias    [E, 2I]       gate = even, up = odd
//   mlp.experts.down_proj            [E, I, dim]
//   mlp.experts.down_proj_bias       [E, dim]
//   mlp.experts.gate_up_proj_blocks  [E, 2I, dim/32, 16]  MXFP4 codes, rows = outputs
//   mlp.experts.gate_up_proj_scales  [E, 2I, dim/32]      their e8m0 scales
// while refit's parameters take one tensor per expert and projection
// (`experts.E.gate_proj.weight` [I, dim], ...: the form Megatron exports). An alias says
// which part of the stacked tensor each of those is, as a view (select the expert,
// transpose, every other row): splitting copies nothing, and each part is written through
// its own sub-shard, so a load or an update in either form, whole or partial, is exact.
//
// MXFP4 codes come as two tensors (blocks and scales); each alias names its partner. A part
// is stored from both as they are in an MXFP4 parameter (weights/block_codes.h), else decoded
// to its values.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace refit {

struct AliasPart {
  std::string name;   // the checkpoint tensor it is: "model.layers.0.mlp.experts.3.up_proj.weight"
  int64_t index = 0;  // the stacked tensor's index along dim 0 (the expert)
  bool transpose = false;  // then its two remaining dims swapped ([in, out] -> [out, in])
  int64_t row_start = 0;   // then rows row_start, row_start + row_step, ...
  int64_t row_step = 1;
};

enum class AliasForm : uint8_t {
  values,        // a float tensor
  mxfp4_blocks,  // u8 [..., rows, K/32, 16]: packed e2m1 codes, element 2i in byte i's low nibble
  mxfp4_scales,  // u8 [..., rows, K/32]: e8m0 exponents (bias 127)
};

struct CheckpointAlias {
  std::string name;  // "model.layers.0.mlp.experts.gate_up_proj"
  AliasForm form = AliasForm::values;
  Shape shape;          // the stacked tensor's shape
  std::string partner;  // MXFP4: the scales of these blocks, or the blocks of these scales
  std::vector<AliasPart> parts;
};

// The part of `stacked` (of the alias's shape) that `part` is: a strided view, no copy.
Tensor alias_part_view(const AliasPart& part, const Tensor& stacked);
// The part's values f32 [rows, K] decoded from MXFP4 blocks and scales (an mxfp4_blocks
// alias's shape and its partner's); e8m0 0xFF (NaN) decodes to NaN.
Tensor decode_mxfp4_part(const AliasPart& part, const Tensor& blocks, const Tensor& scales);
// Throws Error naming the alias unless `t` has its shape and a dtype of its form (a float
// for values, u8 for MXFP4 blocks and scales) on the cpu.
void check_alias_tensor(const CheckpointAlias& alias, const Tensor& t);
// "" when no scale of an mxfp4_scales tensor is 0xFF (NaN), else which one is.
std::string mxfp4_scales_non_finite(const CheckpointAlias& alias, const Tensor& scales);

}  // namespace refit
