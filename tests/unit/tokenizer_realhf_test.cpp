// Every tokenize case of every model in ../shared/realhf, against the ids the Hugging Face
// `tokenizers` library (0.23.2) gives for the same tokenizer.json: `ids` is
// encode(text, add_special_tokens=False), `ids_with_special` encode(text, True) (the
// post-processor's BOS/EOS). Added tokens spelled in the text are matched in both, so refit
// encodes with parse_special. Each chat row's rendered prompt is also encoded without adding
// specials again (the template wrote its own BOS), which is what a server feeds the model.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "realhf_files.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using testing::kRealHf;
json read_json(const fs::path& path) { return testing::read_realhf_json(path); }

std::unique_ptr<Tokenizer> load_model_tokenizer(const json& entry);

// Each tokenizer is loaded once for both tests (Qwen's has 151k tokens).
const Tokenizer& model_tokenizer(const std::string& name, const json& entry) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) slot = load_model_tokenizer(entry);
  return *slot;
}

// A model's tokenizer: its folder, or models.json's "tokenizer_json" (maybe gzip-compressed,
// then unpacked into a temporary folder beside a copy of the folder's tokenizer_config.json).
std::unique_ptr<Tokenizer> load_model_tokenizer(const json& entry) {
  fs::path dir = kRealHf / entry["dir"].get<std::string>();
  if (!entry.contains("tokenizer_json")) return load_tokenizer(dir.string());
  fs::path file = kRealHf / entry["tokenizer_json"].get<std::string>();
  if (file.extension() != ".gz") {
    // load_tokenizer reads tokenizer_config.json beside the tokenizer.json it is given.
    fs::path tmp = fs::temp_directory_path() / ("refit_realhf_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    fs::copy_file(file, tmp / "tokenizer.json", fs::copy_options::overwrite_existing);
    if (fs::exists(dir / "tokenizer_config.json"))
      fs::copy_file(dir / "tokenizer_config.json", tmp / "tokenizer_config.json",
                    fs::copy_options::overwrite_existing);
    return load_tokenizer(tmp.string());
  }
  fs::path tmp = fs::temp_directory_path() / ("refit_realhf_gz_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  std::string cmd =
      "gzip -dc '" + file.string() + "' > '" + (tmp / "tokenizer.json").string() + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  if (fs::exists(dir / "tokenizer_config.json"))
    fs::copy_file(dir / "tokenizer_config.json", tmp / "tokenizer_config.json",
                  fs::copy_options::overwrite_existing);
  return load_tokenizer(tmp.string());
}

std::vector<TokenId> ids_of(const json& a) { return a.get<std::vector<TokenId>>(); }

TEST(TokenizerRealHf, every_tokenize_case_of_every_model_matches_hugging_face) {
  ASSERT_TRUE(fs::exists(kRealHf / "models.json")) << kRealHf;
  const json models = read_json(kRealHf / "models.json")["models"];
  ASSERT_GE(models.size(), 5u);
  size_t checked = 0;
  for (const auto& [name, entry] : models.items()) {
    SCOPED_TRACE(name);
    const json refs = read_json(kRealHf / "refs" / (name + ".json"));
    const Tokenizer* tok = &model_tokenizer(name, entry);
    int wrong = 0;
    for (const json& row : refs["tokenize"]) {
      const std::string text = row["text"];
      std::vector<TokenId> plain = tok->encode(text, /*add_special=*/false, /*parse_special=*/true);
      std::vector<TokenId> with = tok->encode(text, /*add_special=*/true, /*parse_special=*/true);
      EXPECT_EQ(plain, ids_of(row["ids"])) << row["case"] << " " << json(text).dump();
      EXPECT_EQ(with, ids_of(row["ids_with_special"])) << row["case"] << " " << json(text).dump();
      wrong += plain != ids_of(row["ids"]) || with != ids_of(row["ids_with_special"]);
      ++checked;
    }
    EXPECT_EQ(wrong, 0) << "cases that differ from Hugging Face";
    EXPECT_GE(refs["tokenize"].size(), 30u);
  }
  EXPECT_GE(checked, 150u);
}

TEST(TokenizerRealHf, rendered_chat_prompts_encode_without_a_second_bos) {
  const json models = read_json(kRealHf / "models.json")["models"];
  size_t checked = 0;
  for (const auto& [name, entry] : models.items()) {
    SCOPED_TRACE(name);
    const json refs = read_json(kRealHf / "refs" / (name + ".json"));
    const Tokenizer* tok = &model_tokenizer(name, entry);
    for (const json& row : refs["chat"]) {
      if (!row.contains("prompt_ids")) continue;  // a conversation the template refuses
      EXPECT_EQ(tok->encode(row["prompt_text"].get<std::string>(), false, true),
                ids_of(row["prompt_ids"]))
          << row["case"];
      ++checked;
    }
  }
  EXPECT_GE(checked, 20u);
}

}  // namespace
}  // namespace refit
