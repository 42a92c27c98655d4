// Which tensors of a checkpoint a weight update would leave out. A tensor is known when a
// parameter takes it, or when refit consumes it otherwise, as a fresh load does:
//   HF     `<weight>_scale_inv` / `<weight>_scale` beside an FP8 weight (read with it),
//          `<layer>.input_scale` (static FP8 activation scales, read by value or as their
//          own parameters), `*.rotary_emb.inv_freq` (derived from the config),
//          `lm_head.weight` when the embeddings are tied (the head is the embedding table)
//   GGUF   rope_freqs / rope_factors_long / rope_factors_short (read into the config)
// Every other tensor is unknown: an update from disk refuses it by default (a checkpoint
// of another model, or of a model with more tensors, must not be taken for this one).
#pragma once

#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "models/model_config.h"
#include "weights/parameter_set.h"

namespace refit {

// Unknown tensors of `checkpoint` under its own names (GGUF in file order, HF sorted). `source` is
// read_model_config(checkpoint); `served` the engine's config.
std::vector<std::string> unknown_checkpoint_tensors(const Checkpoint& checkpoint,
                                                    const ModelConfig& source,
                                                    const ModelConfig& served,
                                                    const ParameterSet& params);

// Throws Error naming `path`, the first few unknown tensors and their count, and the option
// that accepts them; does nothing when `unknown` is empty.
void refuse_unknown_tensors(const std::string& path, const std::vector<std::string>& unknown);

}  // namespace refit
