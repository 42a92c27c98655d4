// Tokenizer components against Hugging Face `tokenizers` 0.23.2: every case of
// tests/data/tokenizer_components/refs.json (made by tests/tools/make_tokenizer_component_refs.js)
// is a small tokenizer.json (a byte-level or a SentencePiece-style vocabulary, plus one
// normalizer / pre-tokenizer / post-processor / tokenizer_config.json flag setting) with the
// ids tokenizers gives for a fixed list of texts, with and without add_special_tokens. Cases
// marked "refused" name a component refit must refuse by name instead of ignoring it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const json& refs() {
  static const json j = [] {
    std::ifstream in("tests/data/tokenizer_components/refs.json");
    EXPECT_TRUE(in) << "run from the project root";
    return json::parse(in);
  }();
  return j;
}

// The case's folder: tokenizer.json assembled from the shared model and the case's components.
std::string write_case(const json& c) {
  fs::path dir =
      fs::temp_directory_path() /
      ("refit_tok_components_" + c["name"].get<std::string>() + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  json tj = {{"version", "1.0"},
             {"truncation", nullptr},
             {"padding", nullptr},
             {"added_tokens", c["added_tokens"]},
             {"normalizer", c["normalizer"]},
             {"pre_tokenizer", c["pre_tokenizer"]},
             {"post_processor", c["post_processor"]},
             {"decoder", c["decoder"]},
             {"model", refs()["models"][c["model"].get<std::string>()]}};
  std::ofstream(dir / "tokenizer.json") << tj.dump();
  if (c.contains("tokenizer_config"))
    std::ofstream(dir / "tokenizer_config.json") << c["tokenizer_config"].dump();
  return dir.string();
}

const json& find_case(const std::string& name) {
  for (const json& c : refs()["cases"])
    if (c["name"] == name) return c;
  ADD_FAILURE() << "no case " << name;
  static const json none;
  return none;
}

TEST(TokenizerComponents, every_case_matches_hugging_face_tokenizers) {
  const json& texts = refs()["texts"];
  int cases = 0;
  for (const json& c : refs()["cases"]) {
    if (c.contains("refused")) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    std::string dir = write_case(c);
    auto tok = load_tokenizer(dir);
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text = texts[i];
      EXPECT_EQ(tok->encode(text, false, true), c["ids"][i].get<std::vector<TokenId>>())
          << json(text).dump();
      EXPECT_EQ(tok->encode(text, true, true), c["ids_with_special"][i].get<std::vector<TokenId>>())
          << "add_special " << json(text).dump();
    }
    fs::remove_all(dir);
    ++cases;
  }
  EXPECT_GE(cases, 30);
}

TEST(TokenizerComponents, unknown_or_inexact_components_are_refused_by_name) {
  int cases = 0;
  for (const json& c : refs()["cases"]) {
    if (!c.contains("refused")) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    std::string dir = write_case(c);
    try {
      load_tokenizer(dir);
      ADD_FAILURE() << "accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(c["refused"].get<std::string>()), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
    ++cases;
  }
  EXPECT_GE(cases, 6);
}

TEST(TokenizerComponents, components_name_what_is_honoured) {
  auto joined = [](const std::string& name) {
    std::string dir = write_case(find_case(name));
    auto tok = load_tokenizer(dir);
    fs::remove_all(dir);
    std::string s;
    for (const std::string& line : tok->components()) s += line + "\n";
    return s;
  };
  std::string llama3 = joined("post_llama3_sequence");
  EXPECT_NE(llama3.find("model BPE (byte-level)"), std::string::npos) << llama3;
  EXPECT_NE(llama3.find("pre_tokenizer Sequence[Split, ByteLevel]"), std::string::npos) << llama3;
  EXPECT_NE(
      llama3.find("post_processor Sequence[ByteLevel, TemplateProcessing(<|begin_of_text|> $A)]"),
      std::string::npos)
      << llama3;
  EXPECT_NE(joined("normalizer_NFC").find("normalizer NFC"), std::string::npos);
  std::string mistral = joined("metaspace_first_split_false");
  EXPECT_NE(mistral.find("Metaspace(prepend_scheme=first, split=false)"), std::string::npos)
      << mistral;
  std::string flags = joined("flags_llama_bos_eos");
  EXPECT_NE(flags.find("TemplateProcessing(<s> $A </s>) from tokenizer_config.json"),
            std::string::npos)
      << flags;
}

}  // namespace
}  // namespace refit
