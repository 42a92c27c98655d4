// Whether a checkpoint offered as a weight update is the served model: a refit replaces
// values, never the architecture or a hyper-parameter that changes what the forward pass
// computes. A Qwen3 folder whose tensor names and shapes happen to fit a Llama engine, or a
// same-architecture checkpoint with another rope base, is refused by name rather than
// served as garbage.
//
// Compared through refit's own reading of each format (ModelConfig, filled by the
// architecture tables from config.json or GGUF metadata), never as strings: a GGUF file
// and an HF folder of one model are the same model (a Llama 3.1 GGUF's rope_freqs factors
// and its folder's llama3 rope_scaling give the same rotary frequencies, so the
// frequencies are what is compared). Not compared, because they do not change the
// computation: the context length (the server may serve less), the weight dtype (an
// update is converted), token ids (generation settings) and config fields refit ignores.
#pragma once

#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "models/model_config.h"

namespace refit {

struct ConfigDifference {
  std::string field;  // Hugging Face's name where there is one ("rope_theta", "head_dim")
  std::string checkpoint;
  std::string served;
};

// Every hyper-parameter in which `checkpoint` differs from `served` (empty: the same
// model). `tied` says what the checkpoint knows of tie_word_embeddings: a partial folder
// without lm_head says nothing (compare_tied false).
std::vector<ConfigDifference> config_differences(const ModelConfig& checkpoint,
                                                 const ModelConfig& served,
                                                 bool compare_tied = true);

// Throws Error naming `checkpoint`'s path and each differing field with both values.
// `source` is read_model_config(checkpoint).
void check_checkpoint_is_served_model(const Checkpoint& checkpoint, const ModelConfig& source,
                                      const ModelConfig& served);

}  // namespace refit
