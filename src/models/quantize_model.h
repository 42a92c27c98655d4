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
QuantizedModelSummary quantize_linear_weights(Model& model, const QuantScheme& scheme,
                                              bool lm_head = false);

// The scheme a checkpoint's linear weights are stored in: GGUF Q8_0 / MXFP4 tensors, or a
// Hugging Face FP8 checkpoint (config.json quantization_config quant_method "fp8":
// weight_block_size [128, 128] gives fp8-block, else fp8-tensor; activation_scheme
// "dynamic" gives W8A8). Such checkpoints are served quantized without --quant: every
// value is re-quantized from the stored codes exactly (see checkpoint_quant_scheme in
// quantize_model.cpp for why re-quantizing decoded Q8_0/MXFP4 values gives them back).
QuantScheme checkpoint_quant_scheme(const Checkpoint& checkpoint);

// Whether the checkpoint stores its output projection in the scheme of its linear weights
// (GGUF `output.weight`, or `token_embd.weight` when tied, in Q8_0 / MXFP4, as
// llama-quantize writes them): such a head is served quantized too, so decode reads the
// file's bytes, not a float copy 4x larger.
bool checkpoint_lm_head_quantized(const Checkpoint& checkpoint);

}  // namespace refit
