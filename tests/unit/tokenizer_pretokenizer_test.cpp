// The PCRE2 pre-tokenizer: isolated splitting, sequential regexes, Unicode classes, and
// malformed input.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"

namespace refit {
namespace {

std::vector<std::string> split(const std::vector<std::string>& regexes, std::string_view text) {
  RegexSplitter splitter(regexes);
  std::vector<std::string> out;
  for (auto piece : splitter.split(text)) out.emplace_back(piece);
  return out;
}

using Pieces = std::vector<std::string>;

TEST(TokenizerPreTokenizer, gpt2_pattern_splits_words_numbers_and_spaces_like_hf) {
  EXPECT_EQ(split({gpt2_pre_tokenizer_regex()}, "Hello world  123!!"),
            (Pieces{"Hello", " world", " ", " 123", "!!"}));
  EXPECT_EQ(split({gpt2_pre_tokenizer_regex()}, "I'm here\n\n"),
            (Pieces{"I", "'m", " here", "\n\n"}));
}

TEST(TokenizerPreTokenizer, unicode_letter_classes_cover_non_ascii) {
  EXPECT_EQ(split({gpt2_pre_tokenizer_regex()}, "héllo wörld 日本"),
            (Pieces{"héllo", " wörld", " 日本"}));
}

TEST(TokenizerPreTokenizer, later_regexes_split_the_pieces_of_earlier_ones) {
  // Falcon: punctuation runs, then GPT-2, then groups of three digits.
  auto falcon = pre_tokenizer_preset("falcon", "test").regexes;
  EXPECT_EQ(split(falcon, "1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split(falcon, "a...b"), (Pieces{"a", "...", "b"}));
  // StarCoder: every digit alone.
  EXPECT_EQ(split(pre_tokenizer_preset("starcoder", "test").regexes, "x 42"),
            (Pieces{"x", " ", "4", "2"}));
}

TEST(TokenizerPreTokenizer, pieces_always_cover_the_input_even_when_it_is_not_utf8) {
  std::string bad = "ok\xFF\xFE caf\xC3 end\xE2\x98";
  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
                          "starcoder", "default"}) {
    auto regexes = pre_tokenizer_preset(pre, "test").regexes;
    std::string joined;
    for (const auto& piece : split(regexes, bad)) {
      EXPECT_FALSE(piece.empty()) << pre;
      joined += piece;
    }
    EXPECT_EQ(joined, bad) << pre;
  }
}

TEST(TokenizerPreTokenizer, llama3_contractions_are_case_insensitive) {
  EXPECT_EQ(split(pre_tokenizer_preset("llama-bpe", "test").regexes, "YOU'RE 12345"),
            (Pieces{"YOU", "'RE", " ", "123", "45"}));
}

TEST(TokenizerPreTokenizer, every_known_preset_compiles) {
  for (const char* pre :
       {"default",        "llama3",      "llama-bpe",   "dbrx",      "deepseek-llm",
        "deepseek-coder", "deepseek-v3", "falcon",      "starcoder", "refact",
        "gpt-2",          "qwen2",       "stablelm2",   "poro-chat", "bloom",
        "viking",         "tekken",      "chatglm-bpe", "smollm",    "command-r"}) {
    EXPECT_NO_THROW(RegexSplitter(pre_tokenizer_preset(pre, "test").regexes)) << pre;
  }
}

TEST(TokenizerPreTokenizer, unknown_pre_tokenizer_names_the_file_and_the_name) {
  try {
    pre_tokenizer_preset("klingon-bpe", "model.gguf");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("klingon-bpe"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("model.gguf"), std::string::npos);
  }
}

TEST(TokenizerPreTokenizer, a_broken_regex_is_an_error_with_the_pattern) {
  try {
    RegexSplitter splitter({"(unclosed"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos);
  }
}

TEST(TokenizerByteLevel, mapping_is_gpt2s_and_round_trips_every_byte) {
  EXPECT_EQ(byte_level_encode(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level_encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level_encode("A~"), "A~");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(byte_level_decode(byte_level_encode(all)), all);
  // Characters outside the mapping survive decoding unchanged.
  EXPECT_EQ(byte_level_decode("日"), "日");
}

}  // namespace
}  // namespace refit
