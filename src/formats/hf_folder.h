// A Hugging Face checkpoint folder: config.json, optional generation_config.json,
// tokenizer_config.json and tokenizer.json, and weights in model.safetensors or a sharded
// set listed by model.safetensors.index.json ({"weight_map": {tensor: shard file}}).
// Shard names from the index are untrusted: they must be plain file names inside the folder.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/safetensors.h"

namespace refit {

// Reads and parses a JSON file, refusing files over `max_bytes`; FormatError names the file.
nlohmann::json read_json_file(const std::string& path, size_t max_bytes = 64u << 20);

class HfFolder {
 public:
  // `access` is how the weight files are read (the JSON files are parsed at once).
  static std::shared_ptr<HfFolder> open(const std::string& dir,
                                        FileAccess access = FileAccess::mapped);

  const std::string& path() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  // Absent files give a null json.
  const nlohmann::json& generation_config() const { return generation_config_; }
  const nlohmann::json& tokenizer_config() const { return tokenizer_config_; }
  // Path of tokenizer.json when the folder has one (parsing it is the tokenizer layer's job).
  std::optional<std::string> tokenizer_json_path() const { return tokenizer_json_; }

  // config.json "architectures"[0] ("LlamaForCausalLM"), else "model_type", else "".
  std::string architecture() const;

  const std::vector<std::shared_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // Every tensor name, sorted.
  std::vector<std::string> tensor_names() const;
  bool has_tensor(std::string_view name) const { return where_.count(std::string(name)) > 0; }
  const SafetensorsTensorInfo& tensor_info(std::string_view name) const;
  const SafetensorsFile& shard_of(std::string_view name) const;
  Tensor tensor(std::string_view name) const;  // zero-copy view

 private:
  void load_weights(FileAccess access);
  std::string dir_;
  nlohmann::json config_, generation_config_, tokenizer_config_;
  std::optional<std::string> tokenizer_json_;
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  std::unordered_map<std::string, size_t> where_;  // tensor name -> shard index
};

}  // namespace refit
