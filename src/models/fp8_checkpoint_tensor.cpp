#include "models/fp8_checkpoint_tensor.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/float_formats.h"
#include "formats/hf_folder.h"

namespace refit {
namespace {

bool fits(QuantMethod m, const Tensor& scale, int64_t n, int64_t k) {
  const int64_t bn = (n + 127) / 128, bk = (k + 127) / 128;
  switch (m) {
    case QuantMethod::fp8_tensor:
      return scale.numel() == 1;
    case QuantMethod::fp8_channel:
      return scale.numel() == n && (scale.dim() == 1 || scale.size(-1) == 1);
    case QuantMethod::fp8_block:
      return scale.dim() == 2 && scale.size(0) == bn && scale.size(1) == bk;
    default:
      return false;
  }
}

}  // namespace

std::optional<Fp8CheckpointTensor> read_hf_fp8(const HfFolder& hf, const std::string& name,
                                               QuantMethod prefer) {
  if (!hf.has_tensor(name) || hf.tensor_info(name).dtype != DType::f8_e4m3fn) return std::nullopt;
  Fp8CheckpointTensor out;
  out.codes = hf.tensor(name);
  out.scale_name = name + "_scale_inv";
  if (!hf.has_tensor(out.scale_name)) out.scale_name = name + "_scale";
  if (!hf.has_tensor(out.scale_name))
    throw FormatError(
        fmt::format("{}: FP8 tensor '{}' has no '{}_scale_inv' or '{}_scale' beside it", hf.path(),
                    name, name, name));
  if (out.codes.dim() != 2)
    throw FormatError(fmt::format("{}: FP8 tensor '{}' is not 2-D", hf.path(), name));
  const int64_t n = out.codes.size(0), k = out.codes.size(1);
  const Tensor scale = hf.tensor(out.scale_name);
  const DType sd = scale.dtype();
  if (sd != DType::f32 && sd != DType::bf16 && sd != DType::f16)
    throw FormatError(fmt::format("{}: scale '{}' is {}; expected F32, BF16 or F16", hf.path(),
                                  out.scale_name, dtype_name(sd)));
  for (QuantMethod m :
       {prefer, QuantMethod::fp8_tensor, QuantMethod::fp8_channel, QuantMethod::fp8_block})
    if (fits(m, scale, n, k)) {
      out.method = m;
      break;
    }
  if (out.method == QuantMethod::none)
    throw FormatError(fmt::format(
        "{}: '{}' has shape {}; expected a scalar, [{}], [{}, 1] or [{}, {}] for '{}' {}",
        hf.path(), out.scale_name, shape_str(scale.shape()), n, n, (n + 127) / 128, (k + 127) / 128,
        name, shape_str(out.codes.shape())));
  // Widened to f32 exactly (bf16 and f16 are subsets) and laid out per row, as the FP8
  // schemes store them: [N, 1], or [N, ceil(K/128)] with each row its block row's scales.
  const std::vector<float> v = scale.to_floats();
  QuantScheme scheme;
  scheme.method = out.method;
  const int64_t s = scheme.scale_cols(k);
  out.scales = Tensor::empty({n, s}, DType::f32);
  float* o = out.scales.data<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < s; ++c)
      o[r * s + c] = out.method == QuantMethod::fp8_tensor    ? v[0]
                     : out.method == QuantMethod::fp8_channel ? v[r]
                                                              : v[(r / 128) * s + c];
  return out;
}

Tensor decode_fp8(const Fp8CheckpointTensor& t) {
  const int64_t n = t.codes.size(0), k = t.codes.size(1), s = t.scales.size(1);
  const int64_t group = s == 1 ? k : 128;  // one scale per row, or per 128-column block
  const Tensor contiguous = t.codes.contiguous();
  const auto* c = static_cast<const uint8_t*>(contiguous.raw_data());
  const float* sc = t.scales.data<const float>();
  Tensor out = Tensor::empty({n, k}, DType::f32);
  float* o = out.data<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j)
      o[r * k + j] = f8_e4m3fn_to_f32(c[r * k + j]) * sc[r * s + j / group];
  return out;
}

std::optional<Fp8CheckpointTensor> fp8_codes_to_store(const Checkpoint& checkpoint,
                                                      const std::string& name,
                                                      const Parameter& parameter) {
  const QuantMethod m = parameter.quantization().method;
  if (!checkpoint.hf() || (m != QuantMethod::fp8_tensor && m != QuantMethod::fp8_channel &&
                           m != QuantMethod::fp8_block))
    return std::nullopt;
  std::optional<Fp8CheckpointTensor> t = read_hf_fp8(*checkpoint.hf(), name, m);
  if (!t || t->method != m) return std::nullopt;
  return t;
}

}  // namespace refit
