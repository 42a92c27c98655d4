// Quantized serving: which parameters a scheme quantizes, and the scheme a checkpoint is
// already stored in.
//
// The scheme quantizes the weights of every linear layer in the blocks: the parameters
// filled from a matmul tensor of the architecture's table (fused q/k/v and o; fused
// gate/up and down). The embedding, norms and biases stay as loaded; so does the
// LM head, unless the checkpoint itself stores it quantized (GGUF; a tied head is the
// embedding table, which is then stored quantized and decoded row by row on lookup).
// (vLLM keeps lm_head unquantized under online FP8 too.)
// A weight the scheme cannot take (MXFP4 and Q8_0 need K % 32 == 0, as llama.cpp's do)
// stays in its float dtype; the result lists each one and why.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "formats/checkpoint.h"
#include "kernels/quant/quant_scheme.h"
#include "models/model.h"

namespace refit {

struct QuantizedModelSummary {
  QuantScheme scheme;
  std::vector<std::string> quantized;  // parameter names
  std::vector<std::string> kept;       // "name: reason"
  std::string str() const;             // "q8_0: 28 linear weights quantized, 2 kept (...)"
};

// Sets `scheme` on the model's linear weights, and on the LM head too when `lm_head` is
// set (the embedding table, when the head is tied to it). Must run after the model is created and
// before any weight is loaded (the quantized storage is allocated here, once).
// Parameters all of whose checkpoint tensors are in `kept_float` stay unquantized (listed
// as kept); a fused one with only some of them there is refused.
QuantizedModelSummary quantize_linear_weights(
    Model& model, const QuantScheme& scheme, bool lm_head = false,
    const std::unordered_set<std::string>& kept_float = {});

// Quantizes a model created for `checkpoint` before its first load: with `requested` when
// enabled (--quant), else in the checkpoint's own scheme (nothing for a float checkpoint);
// experts stored in a scheme of their own (gpt-oss MXFP4) keep it, the rest as stored.
// Served in its own scheme, a pre-quantized HF checkpoint keeps the layers it stores in float
// (compressed-tensors `ignore`, e.g. lm_head) unquantized, quantizes lm_head where the file
// does, and must agree with its config about which layers those are.
QuantizedModelSummary quantize_for_checkpoint(Model& model, const Checkpoint& checkpoint,
                                              const QuantScheme& requested);

// The scheme a checkpoint's linear weights are stored in: GGUF Q8_0 / MXFP4 tensors, or a
// Hugging Face FP8 checkpoint: quantization_config quant_method "fp8" (weight_block_size
// [128, 128] gives fp8-block, else fp8-tensor; activation_scheme "dynamic" gives W8A8) or
// "compressed-tensors" (models/compressed_tensors.h). Such checkpoints are served quantized
// without --quant. HF FP8 codes and scales are stored as they are (fp8_checkpoint_tensor.h),
// and so are GGUF Q8_0 / MXFP4 blocks (weights/block_codes.h) in a parameter of their scheme;
// a parameter of another scheme quantizes their decoded values.
// Every other quantization_config (AWQ, GPTQ, bitsandbytes, MXFP4, ModelOpt, HQQ, EETQ, ...,
// compressed-tensors int or packed) is refused naming config.json, the method or field, and
// what refit reads.
QuantScheme checkpoint_quant_scheme(const Checkpoint& checkpoint);

// The scheme a checkpoint's expert weights are stored in: a GGUF's ffn_gate_exps type
// (MXFP4 or Q8_0), an HF `quant_method: mxfp4` (gpt-oss: experts only, as `_blocks` and
// `_scales`), else the checkpoint's scheme.
QuantScheme checkpoint_expert_scheme(const Checkpoint& checkpoint);

// quantize_for_checkpoint's work on the linear weights as one scheme (`quant`, with `stored`
// the file's own): the weights of `left_out` checkpoint tensors stay as they are (listed
// as kept).
QuantizedModelSummary quantize_for_dense(Model& model, const Checkpoint& checkpoint,
                                         const QuantScheme& quant, const QuantScheme& stored,
                                         const std::unordered_set<std::string>& left_out);

// One line for `refit inspect`: "quantization: fp8-tensor weights, W8A8, static per-tensor
// activation scales (input_scale)"; "" for an unquantized scheme.
std::string describe_quant_scheme(const QuantScheme& scheme);

// Whether the checkpoint stores its output projection in the scheme of its linear weights
// (GGUF `output.weight`, or `token_embd.weight` when tied, in Q8_0 / MXFP4, as
// llama-quantize writes them): such a head is served quantized too, so decode reads the
// file's bytes, not a float copy 4x larger.
bool checkpoint_lm_head_quantized(const Checkpoint& checkpoint);

}  // namespace refit
