// Hugging Face tokenizer.json loading. The oracle has no tokenizer.json, so each test writes
// one from an oracle GGUF vocabulary (the shape HF's own files have) and checks that the
// llama.cpp vectors still pass through the tokenizer.json path.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kOracle = std::string(REFIT_SHARED_DIR) + "/oracle";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::string text, expected;
};

std::vector<Case> cases(const std::string& base) {
  std::string inp = read_file(base + ".inp");
  std::istringstream out(read_file(base + ".out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> result;
  std::string line;
  for (size_t pos = 0, hit; (hit = inp.find(sep, pos)) != std::string::npos;
       pos = hit + sep.size()) {
    std::getline(out, line);
    size_t b = line.find_first_not_of(' ');
    result.push_back({inp.substr(pos, hit - pos), b == std::string::npos ? "" : line.substr(b)});
  }
  return result;
}

// A fresh folder holding tokenizer.json (+ tokenizer_config.json).
std::string write_folder(const std::string& name, const json& tokenizer, const json& config) {
  fs::path dir =
      fs::temp_directory_path() / ("refit_hf_tok_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  if (!config.is_null()) std::ofstream(dir / "tokenizer_config.json") << config.dump();
  return dir.string();
}

json byte_level_json(const VocabData& v, const json& pre_tokenizer) {
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    // Control tokens are HF "special" added tokens; user-defined ones (DeepSeek has 2398,
    // e.g. single characters like "ü") are added tokens with special = false.
    if (!v.types.empty() && (v.types[i] == TokenType::token_type_control ||
                             v.types[i] == TokenType::token_type_user_defined)) {
      added.push_back({{"id", i},
                       {"content", v.tokens[i]},
                       {"special", v.types[i] == TokenType::token_type_control}});
    }
    vocab[v.tokens[i]] = i;
  }
  json merges = json::array();
  for (const auto& [l, r] : v.merges) merges.push_back(l + " " + r);
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
          {"added_tokens", added},
          {"pre_tokenizer", pre_tokenizer},
          {"decoder", {{"type", "ByteLevel"}}}};
}

void expect_cases(const Tokenizer& tokenizer, const std::string& base) {
  int checked = 0;
  for (const auto& c : cases(base)) {
    EXPECT_EQ(tokenize_for_cli(tokenizer, c.text, true, false), c.expected)
        << "'" << c.text << "' " << base;
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

TEST(TokenizerHfJson, gpt2_byte_level_tokenizer_json_passes_the_gpt2_vectors) {
  std::string base = kOracle + "/vocab/ggml-vocab-gpt-2.gguf";
  VocabData v = vocab_from_gguf(GgufFile::open(base)->metadata());
  json tj =
      byte_level_json(v, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}});
  std::string dir = write_folder(
      "gpt2", tj, json{{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}});
  auto tokenizer = load_tokenizer(dir);
  EXPECT_EQ(tokenizer->vocab().eos(), 50256);
  EXPECT_FALSE(tokenizer->vocab().add_bos());
  expect_cases(*tokenizer, base);
  // The special token is parsed when asked, and hidden when decoding.
  EXPECT_EQ(tokenizer->encode("a<|endoftext|>", false, true), (std::vector<TokenId>{64, 50256}));
  fs::remove_all(dir);
}

TEST(TokenizerHfJson, split_sequence_pre_tokenizer_passes_the_deepseek_vectors) {
  std::string base = kOracle + "/vocab/ggml-vocab-deepseek-llm.gguf";
  VocabData v = vocab_from_gguf(GgufFile::open(base)->metadata());
  json sequence = json::array();
  for (const auto& regex : pre_tokenizer_preset("deepseek-llm", "test").regexes)
    sequence.push_back({{"type", "Split"},
                        {"pattern", {{"Regex", regex}}},
                        {"behavior", "Isolated"},
                        {"invert", false}});
  sequence.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  json tj = byte_level_json(v, {{"type", "Sequence"}, {"pretokenizers", sequence}});
  std::string dir = write_folder("deepseek", tj, json());
  auto tokenizer = load_tokenizer(dir + "/tokenizer.json");
  expect_cases(*tokenizer, base);
  fs::remove_all(dir);
}

// Llama 2's tokenizer.json: BPE with byte_fallback, merges, and a normalizer that prepends
// ▁ and replaces spaces. Merges are derived from the SentencePiece scores the way
// transformers' LlamaConverter does (every split of a piece into two pieces, ordered by
// the merged piece's score).
TEST(TokenizerHfJson, sentencepiece_style_tokenizer_json_passes_the_stories260k_vectors) {
  std::string gguf = kOracle + "/stories260K/stories260K.gguf";
  VocabData v = vocab_from_gguf(GgufFile::open(gguf)->metadata());
  json vocab = json::object();
  std::unordered_map<std::string, size_t> ids;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    vocab[v.tokens[i]] = i;
    ids[v.tokens[i]] = i;
  }
  struct Merge {
    float score;
    size_t merged, left;
    std::string a, b;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] != TokenType::token_type_normal) continue;
    const std::string& t = v.tokens[i];
    for (size_t cut = 1; cut < t.size(); ++cut) {
      auto l = ids.find(t.substr(0, cut)), r = ids.find(t.substr(cut));
      if (l != ids.end() && r != ids.end())
        merges.push_back({v.scores[i], i, l->second, t.substr(0, cut), t.substr(cut)});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& x, const Merge& y) {
    return x.score != y.score ? x.score > y.score : x.merged < y.merged;
  });
  json merge_list = json::array();
  for (const auto& m : merges) merge_list.push_back(json::array({m.a, m.b}));
  json tj = {
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", merge_list},
        {"byte_fallback", true},
        {"unk_token", "<unk>"}}},
      {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                    {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                     {{"type", "Replace"},
                                      {"pattern", {{"String", " "}}},
                                      {"content", "\xE2\x96\x81"}}})}}},
      {"pre_tokenizer", nullptr},
  };
  std::string dir = write_folder(
      "spm", tj,
      json{{"add_bos_token", true}, {"bos_token", {{"content", "<s>"}}}, {"eos_token", "</s>"}});
  auto tokenizer = load_tokenizer(dir);
  EXPECT_EQ(tokenizer->vocab().model(), VocabModel::vocab_model_spm);
  EXPECT_EQ(tokenizer->vocab().bos(), 1);
  EXPECT_EQ(tokenizer->encode("Once upon a time", true, false),
            (std::vector<TokenId>{1, 403, 407, 261, 378}));
  expect_cases(*tokenizer, kOracle + "/stories260K/tokenizer/stories260K.gguf");
  fs::remove_all(dir);
}

TEST(TokenizerHfJson, unsupported_or_malformed_files_are_refused_with_the_file_name) {
  std::string dir = write_folder(
      "bad", json{{"model", {{"type", "WordPiece"}, {"vocab", json::object()}}}}, json());
  try {
    load_tokenizer(dir);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("WordPiece"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  std::ofstream(fs::path(dir) / "tokenizer.json")
      << "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -5}}}";
  EXPECT_THROW(load_tokenizer(dir), FormatError);
  std::ofstream(fs::path(dir) / "tokenizer.json") << "{ not json";
  EXPECT_THROW(load_tokenizer(dir), FormatError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace refit
