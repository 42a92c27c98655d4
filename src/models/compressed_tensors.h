// compressed-tensors (`quantization_config.quant_method: "compressed-tensors"`), the format
// llm-compressor writes and vLLM reads: most FP8 checkpoints on the Hub (RedHatAI /
// neuralmagic `*-FP8`, `*-FP8-dynamic`, `*-FP8-block`). This file reads its config into one
// of refit's FP8 schemes and says which linear layers it quantizes; the tensors themselves
// (`<layer>.weight` F8_E4M3 beside `<layer>.weight_scale`) are read by fp8_checkpoint_tensor.h
// and stored as they are, never re-quantized.
//
// What is read (the compressed-tensors QuantizationArgs, with its defaults):
//   weights            num_bits 8, type "float", symmetric, static; strategy "tensor",
//                      "channel" (or group_size -1) or "block" with block_structure 128x128
//                      -> fp8-tensor / fp8-channel / fp8-block (scales stored exactly:
//                      per-tensor as one scale per checkpoint tensor, per channel per row)
//   input_activations  null: W8A16 (refit computes with f32 activations; vLLM with bf16);
//                      {type float, num_bits 8, dynamic true, strategy "token"}: W8A8 with
//                      per-token e4m3 activations (scale amax / 448), as vLLM's
//                      CompressedTensorsW8A8Fp8 quantizes them dynamically;
//                      {type float, num_bits 8, dynamic false, strategy "tensor"}: W8A8
//                      with static per-tensor scales, the `<layer>.input_scale` tensors
//                      (F32 [1] or []; parameters of their own, refit like weights), x
//                      quantized as e4m3(x / s) with s the max over a fused layer's
//                      shards, as vLLM's Fp8LinearOp does (not with block weights: vLLM
//                      refuses that pairing too)
//   format             "float-quantized" or "naive-quantized" (both store e4m3 codes
//                      unpacked), at the top or per group
//   targets / ignore   layer names, "re:" regexes (Python re.match: anchored at the start)
//                      and the class name "Linear" (every linear layer)
// Everything else that changes what a layer computes is refused by name, with the file and
// what refit reads instead: int weights (W8A8-int8, W4A16), packed formats (pack-quantized,
// marlin-24, nvfp4/mxfp4-pack-quantized), group / tensor_group strategies, asymmetric
// scales, static activation scales per channel, group or token, dynamic per-tensor or
// per-group activations, output activations, kv_cache_scheme, sparsity and
// transform configs. Calibration-only fields (observer, observer_kwargs) do not change
// inference and are skipped.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/quant/quant_scheme.h"

namespace refit {

struct CompressedTensorsConfig {
  QuantScheme scheme;                // of every quantized linear weight
  std::vector<std::string> targets;  // over all config_groups
  std::vector<std::string> ignore;

  // Whether the checkpoint quantizes the linear layer `module` (a weight's name without
  // ".weight": "model.layers.0.self_attn.q_proj", "lm_head"): a target matches it and no
  // ignore entry does.
  bool quantizes(const std::string& module) const;
};

// Parses a quantization_config whose quant_method is "compressed-tensors"; `file` names
// config.json in errors. Throws Error naming the file and the refused field.
CompressedTensorsConfig parse_compressed_tensors(const nlohmann::json& quantization_config,
                                                 const std::string& file);

}  // namespace refit
