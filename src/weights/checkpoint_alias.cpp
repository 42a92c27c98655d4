#include "weights/checkpoint_alias.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/float_formats.h"

namespace refit {

Tensor alias_part_view(const AliasPart& part, const Tensor& stacked) {
  Tensor t = stacked.select(0, part.index);
  if (part.transpose) t = t.transpose(0, 1);
  if (part.row_step != 1 || part.row_start != 0)
    t = t.slice(0, part.row_start, t.size(0), part.row_step);
  return t;
}

Tensor decode_mxfp4_part(const AliasPart& part, const Tensor& blocks, const Tensor& scales) {
  // blocks [rows, G, 16] and scales [rows, G] of this part, rows strided when interleaved.
  const Tensor b = alias_part_view(part, blocks).contiguous();
  const Tensor s = alias_part_view(part, scales).contiguous();
  const int64_t rows = b.size(0), groups = b.size(1), k = groups * 32;
  Tensor out = Tensor::empty({rows, k}, DType::f32);
  const uint8_t* code = b.data<const uint8_t>();
  const uint8_t* scale = s.data<const uint8_t>();
  float* o = out.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float x = e8m0_to_f32(scale[r * groups + g]);
      const uint8_t* in = code + (r * groups + g) * 16;
      float* dst = o + r * k + g * 32;
      for (int i = 0; i < 16; ++i) {  // transformers' convert_moe_packed_tensors order
        dst[2 * i] = f4_e2m1_to_f32(in[i] & 0x0F) * x;
        dst[2 * i + 1] = f4_e2m1_to_f32(in[i] >> 4) * x;
      }
    }
  return out;
}

void check_alias_tensor(const CheckpointAlias& alias, const Tensor& t) {
  const char* form = alias.form == AliasForm::values         ? "a float tensor"
                     : alias.form == AliasForm::mxfp4_blocks ? "MXFP4 blocks (U8)"
                                                             : "MXFP4 scales (U8)";
  const bool dtype_ok =
      alias.form == AliasForm::values
          ? dtype_is_floating(t.dtype()) && t.dtype() != DType::f4_e2m1 && t.dtype() != DType::e8m0
          : t.dtype() == DType::u8;
  if (t.shape() != alias.shape || !dtype_ok)
    fail("'{}' is {} of shape {}, expected {} of shape {} (the stacked form of {} tensors)",
         alias.name, dtype_name(t.dtype()), shape_str(t.shape()), form, shape_str(alias.shape),
         alias.parts.size());
  if (t.device().type != DeviceType::cpu)
    fail("'{}' is on {}; stacked expert tensors are split on the cpu", alias.name,
         t.device().str());
}

std::string mxfp4_scales_non_finite(const CheckpointAlias& alias, const Tensor& scales) {
  if (alias.form != AliasForm::mxfp4_scales) return "";
  const Tensor s = scales.contiguous();
  const uint8_t* v = s.data<const uint8_t>();
  for (int64_t i = 0; i < s.numel(); ++i)
    if (v[i] == 0xFF) {
      std::string at;
      int64_t rest = i;
      std::vector<int64_t> index(s.shape().size());
      for (size_t d = s.shape().size(); d-- > 0;) {
        index[d] = rest % s.shape()[d];
        rest /= s.shape()[d];
      }
      for (int64_t x : index) at += fmt::format("{}{}", at.empty() ? "" : ", ", x);
      return fmt::format("scale [{}] of '{}' is 0xFF (e8m0 NaN)", at, alias.name);
    }
  return "";
}

}  // namespace refit
