// Synthetic checkpoints on disk (what `refit synth` writes): the weights of
// synthetic/synthetic_model.h and the vocabulary of synthetic/synthetic_vocab.h, as
//   * a Hugging Face folder: config.json, generation_config.json, tokenizer.json,
//     tokenizer_config.json and model.safetensors (or model-0000i-of-0000n.safetensors shards
//     plus model.safetensors.index.json when the weights exceed max_shard_bytes), or
//   * one GGUF v3 file with llama.cpp's tensor names and metadata; for llama the q/k rows are
//     permuted as llama.cpp's converter does, so both files give the same logits.
// gpt-oss's HF experts are written stacked, as transformers stores them (gate_up_proj
// [E, dim, 2I] interleaved, or MXFP4 `_blocks` / `_scales`: models/stacked_experts.h).
// Tensors are generated and written one at a time: memory stays at one tensor however large
// the model.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/dtype.h"
#include "models/model_config.h"

namespace refit {

struct SyntheticCheckpointOptions {
  DType weight_dtype = DType::f32;  // f32, f16 or bf16: matmul weights and embeddings
  // GGUF only: matmul weights and embeddings as Q8_0, quantized from the f32 values as
  // llama-quantize does (weight_dtype is then ignored). HF refuses it.
  bool gguf_q8_0 = false;
  // Expert weights as MXFP4, quantized from the f32 values by ggml's reference quantizer
  // (as llama-quantize MXFP4_MOE): GGUF block_mxfp4 tensors (file type 38), HF gpt-oss
  // `_blocks` / `_scales` with quantization_config mxfp4, the same values in both.
  bool mxfp4_experts = false;
  uint64_t seed = 0;
  std::string name;  // general.name / description; default "synthetic-<arch>-<dim>d-s<seed>"
  // HF only: the largest shard (transformers' save_pretrained default is 5 GB).
  uint64_t max_shard_bytes = 5'000'000'000ull;
  // Called after each tensor is written (index from 1) — for a progress bar.
  std::function<void(size_t written, size_t total, uint64_t bytes_written)> progress;
};

// Writes into `dir` (created if missing; existing files of the same names are replaced).
void write_synthetic_hf(const std::string& dir, const ModelConfig& config,
                        const SyntheticCheckpointOptions& options);
void write_synthetic_gguf(const std::string& path, const ModelConfig& config,
                          const SyntheticCheckpointOptions& options);

// The HF config.json / generation_config.json of a config (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM fields).
nlohmann::json hf_config_json(const ModelConfig& config, DType weight_dtype,
                              bool mxfp4_experts = false);
nlohmann::json hf_generation_config_json(const ModelConfig& config);

// GGUF general.file_type (llama_ftype) for the dtype of a model's weights (7 = MOSTLY_Q8_0
// when q8_0, 38 = MOSTLY_MXFP4_MOE when the experts are MXFP4).
uint32_t gguf_file_type(DType weight_dtype, bool q8_0 = false, bool mxfp4_experts = false);

}  // namespace refit
