// Vocab validation and the SentencePiece merge order on hand-made vocabularies.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace refit {
namespace {

VocabData tiny_spm() {
  VocabData d;
  d.source = "tiny.gguf";
  d.tokens = {"<unk>",
              "<s>",
              "</s>",
              "\xE2\x96\x81",
              "a",
              "b",
              "ab",
              "\xE2\x96\x81"
              "ab",
              "<0x63>"};
  d.scores = {0, 0, 0, -1, -2, -2, -1.5f, -0.5f, 0};
  d.types = {
      TokenType::token_type_unknown, TokenType::token_type_control, TokenType::token_type_control,
      TokenType::token_type_normal,  TokenType::token_type_normal,  TokenType::token_type_normal,
      TokenType::token_type_normal,  TokenType::token_type_normal,  TokenType::token_type_byte};
  d.bos = 1;
  d.eos = 2;
  d.unk = 0;
  return d;
}

TEST(TokenizerVocab, spm_merges_by_score_and_falls_back_to_bytes_then_unk) {
  Tokenizer tokenizer(tiny_spm());
  // "▁ab" outranks "ab": the whole word becomes one token.
  EXPECT_EQ(tokenizer.encode("ab", false, false), (std::vector<TokenId>{7}));
  EXPECT_EQ(tokenizer.encode("ab", true, false), (std::vector<TokenId>{1, 7}));
  // 'c' has a byte token, 'd' has neither a piece nor a byte token: <unk>.
  EXPECT_EQ(tokenizer.encode("abcd", false, false), (std::vector<TokenId>{7, 8, 0}));
}

TEST(TokenizerVocab, mismatched_arrays_are_refused_naming_the_file) {
  VocabData d = tiny_spm();
  d.scores.pop_back();
  try {
    Vocab v(d);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tiny.gguf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("scores"), std::string::npos) << e.what();
  }
  d = tiny_spm();
  d.types.resize(3);
  EXPECT_THROW(Vocab{d}, FormatError);
  d = tiny_spm();
  d.model = VocabModel::vocab_model_bpe;  // byte-level BPE needs merges
  EXPECT_THROW(Vocab{d}, FormatError);
  d = VocabData{};
  EXPECT_THROW(Vocab{d}, FormatError);
}

TEST(TokenizerVocab, out_of_range_special_ids_are_dropped_and_a_needed_bos_is_an_error) {
  VocabData d = tiny_spm();
  d.bos = 1000;
  d.eos = -7;
  Tokenizer tokenizer(d);
  EXPECT_EQ(tokenizer.vocab().bos(), kNoToken);
  EXPECT_EQ(tokenizer.vocab().eos(), kNoToken);
  EXPECT_THROW(tokenizer.encode("ab", /*add_special=*/true, false), Error);
  EXPECT_EQ(tokenizer.encode("ab", false, false), (std::vector<TokenId>{7}));
}

TEST(TokenizerVocab, empty_tokens_are_renamed_so_they_never_match) {
  VocabData d = tiny_spm();
  d.tokens[4] = "";
  Vocab v(d);
  EXPECT_EQ(v.text(4), "[EMPTY_4]");
  EXPECT_EQ(v.find(""), kNoToken);
}

TEST(TokenizerVocab, user_defined_tokens_are_split_out_and_rstrip_swallows_spaces) {
  VocabData d = tiny_spm();
  d.tokens.push_back("<|user|>");
  d.scores.push_back(0);
  d.types.push_back(TokenType::token_type_user_defined);
  d.rstrip_tokens = {9};
  Tokenizer tokenizer(d);
  // Split even without parse_special; the space after it is swallowed; the dummy prefix
  // comes back for the text after a special token.
  EXPECT_EQ(tokenizer.encode("ab<|user|>  ab", false, false), (std::vector<TokenId>{7, 9, 7}));
}

}  // namespace
}  // namespace refit
