// The o200k pre-tokenizer (GPT-4o, gpt-oss's o200k_harmony) against Hugging Face
// `tokenizers` 0.23.2: tests/data/harmony/tokenizer.json is a small byte-level BPE with
// gpt-oss's pre-tokenizer (Split with the o200k regex, then ByteLevel without its own regex)
// and the harmony special tokens as added tokens; refs.json holds the ids tokenizers gives
// for texts that exercise the regex (made by tests/tools/make_harmony_tokenizer.js).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

using json = nlohmann::json;

const json& refs() {
  static const json j = [] {
    std::ifstream in("tests/data/harmony/refs.json");
    EXPECT_TRUE(in) << "run from the project root";
    return json::parse(in);
  }();
  return j;
}

const Tokenizer& harmony_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = load_tokenizer("tests/data/harmony");
  return *tok;
}

TEST(TokenizerO200k, tokenizer_json_split_form_matches_hugging_face) {
  const Tokenizer& tok = harmony_tokenizer();
  ASSERT_GE(refs()["cases"].size(), 20u);
  for (const json& c : refs()["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok.encode(text, /*add_special=*/false, /*parse_special=*/true),
              c["ids"].get<std::vector<TokenId>>())
        << json(text).dump();
  }
}

TEST(TokenizerO200k, harmony_specials_are_single_tokens_and_decode_back) {
  const Tokenizer& tok = harmony_tokenizer();
  for (const auto& [text, id] : refs()["specials"].items()) {
    EXPECT_EQ(tok.encode(text, false, true), std::vector<TokenId>{id.get<TokenId>()}) << text;
    DecodeOptions keep;
    keep.skip_special = false;
    const std::vector<TokenId> ids{id.get<TokenId>()};
    EXPECT_EQ(tok.decode(ids, keep), text);
  }
}

// The regex cuts where o200k does, not where GPT-2's or Llama 3's would: at a lower-to-upper
// case change, with a contraction of any case kept on its word, and digits by three.
TEST(TokenizerO200k, splits_at_case_changes_contractions_and_digit_triples) {
  const RegexSplitter split({o200k_pre_tokenizer_regex()});
  auto pieces = [&](std::string_view text) {
    std::vector<std::string> out;
    for (std::string_view p : split.split(text)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("HelloWorld"), (V{"Hello", "World"}));
  EXPECT_EQ(pieces("XMLHttpRequest"), (V{"XMLHttp", "Request"}));
  EXPECT_EQ(pieces("They'RE DON'T"), (V{"They'RE", " DON'T"}));
  EXPECT_EQ(pieces("1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(pieces("a/b\n\nc"), (V{"a", "/b", "\n\n", "c"}));  // one non-letter leads a word
  EXPECT_EQ(pieces("x ...!/\nz"), (V{"x", " ...!/\n", "z"}));
}

// A GGUF names the pre-tokenizer instead of carrying it: llama.cpp writes "gpt-4o" for the
// o200k tokenizers, and refit runs the same pattern the tokenizer.json has.
TEST(TokenizerO200k, gguf_pre_names_run_the_tokenizer_json_pattern) {
  for (const char* name : {"gpt-4o", "o200k", "llama4"}) {
    const PreTokenizerPreset p = pre_tokenizer_preset(name, "test.gguf");
    EXPECT_EQ(p.regexes, std::vector<std::string>{refs()["o200k_regex"].get<std::string>()})
        << name;
    EXPECT_FALSE(p.clean_spaces) << name;
  }
}

// The same vocabulary through the GGUF path (tokens, merges, pre "gpt-4o", the specials as
// control tokens) encodes every reference text as Hugging Face does.
TEST(TokenizerO200k, gguf_form_matches_hugging_face) {
  std::ifstream in("tests/data/harmony/tokenizer.json");
  const json tj = json::parse(in);
  VocabData d;
  d.source = "o200k-test.gguf";
  d.model = VocabModel::vocab_model_bpe;
  const json& vocab = tj["model"]["vocab"];
  d.tokens.resize(vocab.size() + tj["added_tokens"].size());
  d.types.assign(d.tokens.size(), TokenType::token_type_normal);
  for (const auto& [text, id] : vocab.items()) d.tokens[id.get<size_t>()] = text;
  for (const json& t : tj["added_tokens"]) {
    d.tokens[t["id"].get<size_t>()] = t["content"];
    d.types[t["id"].get<size_t>()] = TokenType::token_type_control;
  }
  for (const json& m : tj["model"]["merges"]) d.merges.emplace_back(m[0], m[1]);
  d.pre_name = "gpt-4o";
  d.add_bos = false;
  const Tokenizer tok(std::move(d));
  for (const json& c : refs()["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok.encode(text, false, true), c["ids"].get<std::vector<TokenId>>())
        << json(text).dump();
  }
}

}  // namespace
}  // namespace refit
