// The token ids that end generation (unless a request says ignore_eos), decided once per
// loaded model so every front end (OpenAI and SGLang routes, the CLI, the Python module)
// stops on the same set.
//
// Hugging Face folders, as vLLM stops: the tokenizer's eos token (the primary one), every id
// of config.json's eos_token_id and every id of generation_config.json's eos_token_id (each
// an int or a list: Llama 3.1 Instruct lists [128001, 128008, 128009]). A folder without
// tokenizer files still stops on config.json's ids, never on a default 2.
//
// GGUF files, as llama.cpp's llama_vocab::impl::load builds special_eog_ids (llama-vocab.cpp):
// the ids of tokenizer.ggml.eos/eot/eom_token_id (keys naming an id past the vocabulary are
// ignored, as llama.cpp warns and ignores them), the FIM pad/repo/file-separator tokens (by
// key, else by text), and every token whose text is one of llama.cpp's end-of-generation
// texts ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", ...); then llama.cpp's two fix-ups:
// "<|end|>" is dropped when "<|return|>"/"<|call|>" (gpt-oss) or "<|calls|>"/"<|flush|>" mark
// turns, and "</s>" is dropped when "<|tool_response>" is present (Gemma 4).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace refit {

class GgufMetadata;

struct StopTokenIds {
  std::vector<int32_t> ids;  // sorted, unique
  int32_t primary = -1;      // the tokenizer's eos (else the config's first); -1: none
  // Where each group of ids came from, for `refit inspect` and the server's start line:
  // {"tokenizer eos", [2]}, {"config.json eos_token_id", [...]}, ...
  std::vector<std::pair<std::string, std::vector<int32_t>>> origins;

  // Adds `ids` (may repeat) under `origin`; an empty list adds nothing.
  void add(const std::string& origin, const std::vector<int32_t>& ids);
  bool contains(int32_t id) const;
  // "128001, 128008, 128009 (config.json eos_token_id; generation_config.json eos_token_id)"
  std::string str() const;
};

// `value` (an eos_token_id field) as ids: an integer or a list of integers, each in
// [0, 2^31); null gives none. FormatError "<source>: '<field>' must be ..." otherwise.
std::vector<int32_t> json_token_ids(const nlohmann::json& value, const std::string& source,
                                    const std::string& field);

// llama.cpp's end-of-generation ids of a GGUF vocabulary (see the file comment).
std::vector<int32_t> gguf_end_of_generation_ids(const GgufMetadata& metadata);

}  // namespace refit
