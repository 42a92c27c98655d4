#include "formats/hf_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "formats/json_depth.h"

namespace refit {

namespace fs = std::filesystem;

nlohmann::json read_json_file(const std::string& path, size_t max_bytes) {
  ByteSource src = ByteSource::map_file(path);
  if (src.size() > max_bytes)
    format_fail(path, "JSON file is {} bytes, more than the {} byte limit", src.size(), max_bytes);
  if (src.size() == 0) format_fail(path, "empty file, expected JSON");
  const char* text = reinterpret_cast<const char*>(src.data());
  nlohmann::json j;
  src.parse_checked([&] {
    try {
      j = parse_json_limited(text, text + src.size(), path);
    } catch (const nlohmann::json::exception& e) {
      format_fail(path, "not valid JSON: {}", e.what());
    }
  });
  return j;
}

std::shared_ptr<HfFolder> HfFolder::open(const std::string& dir, FileAccess access) {
  if (!fs::is_directory(dir)) throw FormatError(fmt::format("{}: not a directory", dir));
  auto f = std::shared_ptr<HfFolder>(new HfFolder());
  f->dir_ = dir;
  const fs::path root(dir);
  const fs::path config = root / "config.json";
  if (!fs::exists(config)) format_fail(dir, "no config.json: not a Hugging Face checkpoint folder");
  f->config_ = read_json_file(config.string());
  if (!f->config_.is_object()) format_fail(config.string(), "config.json must be a JSON object");
  for (auto [name, slot] : {std::pair{"generation_config.json", &f->generation_config_},
                            std::pair{"tokenizer_config.json", &f->tokenizer_config_}}) {
    fs::path p = root / name;
    if (fs::exists(p)) {
      *slot = read_json_file(p.string());
      if (!slot->is_object()) format_fail(p.string(), "must be a JSON object");
    }
  }
  if (fs::exists(root / "tokenizer.json")) f->tokenizer_json_ = (root / "tokenizer.json").string();
  f->load_weights(access);
  return f;
}

void HfFolder::load_weights(FileAccess access) {
  const fs::path root(dir_);
  const fs::path index = root / "model.safetensors.index.json";
  std::map<std::string, std::string> tensor_to_file;  // from the index, when there is one
  std::vector<std::string> files;
  if (fs::exists(index)) {
    nlohmann::json j = read_json_file(index.string());
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      format_fail(index.string(), "needs a \"weight_map\" object");
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string())
        format_fail(index.string(), "weight_map entry '{}' must be a file name", printable(name));
      std::string shard = file.get<std::string>();
      // A shard must be a plain file in this folder: no directories, no "..".
      if (shard.empty() || shard.find('/') != std::string::npos ||
          shard.find('\\') != std::string::npos || shard == "." || shard == "..")
        format_fail(index.string(), "weight_map entry '{}' names '{}', not a file in the folder",
                    printable(name), printable(shard));
      tensor_to_file[name] = shard;
      if (std::find(files.begin(), files.end(), shard) == files.end()) files.push_back(shard);
    }
  } else if (fs::exists(root / "model.safetensors")) {
    files.push_back("model.safetensors");
  } else {
    for (const auto& e : fs::directory_iterator(root))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    if (files.empty())
      format_fail(dir_, "no model.safetensors, model.safetensors.index.json or *.safetensors");
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    shards_.push_back(SafetensorsFile::open((root / file).string(), access));
    const size_t shard = shards_.size() - 1;
    for (const auto& t : shards_.back()->tensors()) {
      if (!tensor_to_file.empty()) {
        auto it = tensor_to_file.find(t.name);
        if (it == tensor_to_file.end() || it->second != file) continue;  // not indexed here
      }
      auto [pos, inserted] = where_.emplace(t.name, shard);
      if (!inserted)
        format_fail(dir_, "tensor '{}' appears in both {} and {}", printable(t.name),
                    shards_[pos->second]->path(), shards_.back()->path());
    }
  }
  for (const auto& [name, file] : tensor_to_file)
    if (!where_.count(name))
      format_fail((root / file).string(), "the index lists tensor '{}' here, but the file lacks it",
                  printable(name));
}

std::string HfFolder::architecture() const {
  if (config_.contains("architectures") && config_["architectures"].is_array() &&
      !config_["architectures"].empty() && config_["architectures"][0].is_string())
    return config_["architectures"][0].get<std::string>();
  if (config_.contains("model_type") && config_["model_type"].is_string())
    return config_["model_type"].get<std::string>();
  return "";
}

std::vector<std::string> HfFolder::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, shard] : where_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

const SafetensorsFile& HfFolder::shard_of(std::string_view name) const {
  auto it = where_.find(std::string(name));
  if (it == where_.end())
    format_fail(dir_, "no tensor named '{}' ({} tensors in the checkpoint)", name, where_.size());
  return *shards_[it->second];
}

const SafetensorsTensorInfo& HfFolder::tensor_info(std::string_view name) const {
  return shard_of(name).tensor_info(name);
}

Tensor HfFolder::tensor(std::string_view name) const { return shard_of(name).tensor(name); }

}  // namespace refit
