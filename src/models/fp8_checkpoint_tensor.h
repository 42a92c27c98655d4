// An FP8 weight as a Hugging Face checkpoint stores it: F8_E4M3 codes and, beside them, the
// scale that multiplies them (`<name>_scale_inv`, DeepSeek / Qwen "fp8"; `<name>_scale`,
// compressed-tensors and vLLM). The scale's shape says its granularity: one value (per
// tensor), one per row ([N] or [N, 1], per channel) or one per 128 x 128 block
// ([ceil(N/128), ceil(K/128)]).
//
// A parameter whose FP8 scheme has the file's granularity stores these codes and scales as
// they are (Parameter::load_codes): re-quantizing the decoded values would not give them
// back in general (a per-tensor scale rounded to bf16, as llm-compressor stores it, leaves
// the largest code below 448, so amax / 448 is another scale and every code moves).
#pragma once

#include <optional>
#include <string>

#include "formats/checkpoint.h"
#include "kernels/quant/quant_scheme.h"
#include "weights/parameter.h"

namespace refit {

class HfFolder;

struct Fp8CheckpointTensor {
  Tensor codes;   // f8_e4m3fn [N, K], a view of the file
  Tensor scales;  // f32 [N, S]: code (r, c) is multiplied by scales[r, c / group]
  QuantMethod method = QuantMethod::none;  // fp8_tensor, fp8_channel or fp8_block
  std::string scale_name;
};

// `name` as stored in an HF folder when it is F8_E4M3, else nullopt. Where the scale's shape
// fits several granularities (one value for a tensor of one block), `prefer` decides.
// Throws FormatError naming the file when the scale is missing, misshapen or not a float.
std::optional<Fp8CheckpointTensor> read_hf_fp8(const HfFolder& hf, const std::string& name,
                                               QuantMethod prefer = QuantMethod::none);

// code * scale in f32 (what the weight is worth, for a parameter of another scheme).
Tensor decode_fp8(const Fp8CheckpointTensor& t);

// The codes and scales of checkpoint tensor `name` when `parameter` stores them as they are:
// the checkpoint holds it in FP8 and the parameter's scheme is FP8 of the same granularity.
// Else nullopt: the tensor is loaded by value (decoded, then quantized by the parameter).
std::optional<Fp8CheckpointTensor> fp8_codes_to_store(const Checkpoint& checkpoint,
                                                      const std::string& name,
                                                      const Parameter& parameter);

}  // namespace refit
