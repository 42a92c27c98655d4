// load_tokenizer(): find the vocabulary in whatever checkpoint the user points at.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/hf_folder.h"
#include "formats/llama2c.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {

namespace {

namespace fs = std::filesystem;

enum class FileKind { gguf, json, folder, other };

FileKind kind_of(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return FileKind::folder;
  if (!fs::exists(path, ec)) throw FormatError(fmt::format("{}: no such file or folder", path));
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::string_view(magic, 4) == "GGUF") return FileKind::gguf;
  if (fs::path(path).extension() == ".json") return FileKind::json;
  return FileKind::other;
}

std::unique_ptr<Tokenizer> from_hf_json(const std::string& tokenizer_json) {
  nlohmann::json tj = read_json_file(tokenizer_json);
  fs::path config_path = fs::path(tokenizer_json).parent_path() / "tokenizer_config.json";
  nlohmann::json config;
  std::error_code ec;
  if (fs::exists(config_path, ec)) config = read_json_file(config_path.string());
  return std::make_unique<Tokenizer>(vocab_from_hf(tj, config, tokenizer_json));
}

// A tokenizer from one path that names a vocabulary on its own (not a llama2.c model).
std::unique_ptr<Tokenizer> from_vocabulary_file(const std::string& path,
                                                std::optional<int32_t> llama2c_vocab_size) {
  switch (kind_of(path)) {
    case FileKind::gguf: {
      auto gguf = GgufFile::open(path);
      if (!gguf->metadata().has("tokenizer.ggml.model"))
        throw FormatError(
            fmt::format("{}: this GGUF has no tokenizer (no tokenizer.ggml.model key)", path));
      return std::make_unique<Tokenizer>(vocab_from_gguf(gguf->metadata()));
    }
    case FileKind::json:
      return from_hf_json(path);
    case FileKind::folder: {
      fs::path tokenizer_json = fs::path(path) / "tokenizer.json";
      std::error_code ec;
      if (!fs::exists(tokenizer_json, ec))
        throw FormatError(fmt::format(
            "{}: folder has no tokenizer.json (for a llama2.c tokenizer pass --tokenizer "
            "tokenizer.bin)",
            path));
      return from_hf_json(tokenizer_json.string());
    }
    case FileKind::other:
      break;
  }
  Llama2cTokenizerData data = read_llama2c_tokenizer(path, llama2c_vocab_size);
  return std::make_unique<Tokenizer>(vocab_from_llama2c(data, path));
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_path,
                                          const std::optional<std::string>& tokenizer_path) {
  if (!tokenizer_path) {
    if (kind_of(model_path) != FileKind::other)
      return from_vocabulary_file(model_path, std::nullopt);
    // A llama2.c file alone: a model .bin carries no vocabulary; a tokenizer .bin does.
    bool is_llama2c_model = false;
    try {
      Llama2cModel::open(model_path);
      is_llama2c_model = true;
    } catch (const FormatError&) {
      // Not a model: read it as a tokenizer .bin below (which reports its own errors).
    }
    if (is_llama2c_model)
      throw FormatError(
          fmt::format("{}: a llama2.c model has no vocabulary; pass its tokenizer with --tokenizer "
                      "(e.g. tok512.bin)",
                      model_path));
    return from_vocabulary_file(model_path, std::nullopt);
  }
  // The vocabulary size of a llama2.c tokenizer comes from its model's header.
  std::optional<int32_t> vocab_size;
  if (kind_of(*tokenizer_path) == FileKind::other && kind_of(model_path) == FileKind::other)
    vocab_size = Llama2cModel::open(model_path)->config().vocab_size;
  return from_vocabulary_file(*tokenizer_path, vocab_size);
}

}  // namespace refit
