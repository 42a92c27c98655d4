// Rotary scaling and sliding-window layers from GGUF metadata, as llama.cpp reads them.
#pragma once

#include <string>
#include <vector>

#include "formats/gguf.h"
#include "models/model_config.h"

namespace refit {

// `<arch>.rope.scaling.type` linear or yarn into c.rope_scaling (c.max_seq_len already set).
// yarn, as llama.cpp runs it (ggml_rope_yarn_corr_dims and rope_yarn in ggml's rope):
//   factor = rope.scaling.factor (freq_scale = 1 / factor); the original context
//   n_ctx_orig = rope.scaling.original_context_length (default: context_length);
//   beta_fast / beta_slow = rope.scaling.yarn_beta_fast / yarn_beta_slow (default 32 / 1);
//   ext_factor 1 (llama.cpp's default for a yarn model), so the correction range
//   [floor(corr(beta_fast)), ceil(corr(beta_slow))] clamped to [0, rot_dim - 1], with
//   corr(b) = rot_dim ln(n_ctx_orig / (2 pi b)) / (2 ln base), is ROUNDED (truncate true;
//   Hugging Face's gpt-oss config says truncate false and does not round);
//   theta_i' = theta_i / factor (1 - r_i) + theta_i r_i, r_i = 1 - clamp((i - lo) / (hi - lo));
//   cos and sin multiplied by mscale = attn_factor (rope.scaling.yarn_attn_factor, default 1)
//   times 1 + 0.1 ln(factor) (ggml applies that term whenever ext_factor != 0).
//   For gpt-oss-yarn (factor 32, n_ctx_orig 4096, head_dim 64, base 150000): corr gives
//   8.093 and 17.398, rounded to [8, 18]; mscale 1 + 0.1 ln 32 = 1.34657.
// Other types are left to the loader (longrope reads its factor tensors).
void read_gguf_rope_scaling(const GgufMetadata& m, const std::string& arch_name, ModelConfig& c);

// llama.cpp's sliding-window layer pattern (hparams.set_swa_pattern(n), dense_first false):
// layer l slides when n == 0 or l % n < n - 1. n = 2 (gpt-oss, LLM_ARCH_OPENAI_MOE) slides
// on the even layers 0, 2, 4, ...; n = 1 on none.
std::vector<bool> llamacpp_swa_pattern_layers(int64_t n_layers, int64_t pattern);

// Per-layer windows: `window` on the layers `sliding` marks, 0 (full) on the others; fills
// c.layers from c's model-wide settings. For gpt-oss: HF `layer_types` via
// hf_sliding_layer_types (models/hf_layer_windows.h) with `sliding_window`; GGUF
// `gpt-oss.attention.sliding_window` with llamacpp_swa_pattern_layers(n_layers, 2).
void set_sliding_layers(ModelConfig& c, int64_t window, const std::vector<bool>& sliding);

}  // namespace refit
