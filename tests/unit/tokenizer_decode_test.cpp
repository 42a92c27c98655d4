// Decoding: pieces, byte fallback, round trips over every oracle vocabulary, and the
// streaming decoder that must never emit half a UTF-8 character.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "formats/byte_source.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

const std::string kOracle = std::string(REFIT_SHARED_DIR) + "/oracle";
const std::string kStoriesGguf = kOracle + "/stories260K/stories260K.gguf";
const std::string kTok512 = kOracle + "/stories260K/tok512.bin";

std::vector<std::string> vector_texts() {
  std::ifstream in(kOracle + "/vocab/ggml-vocab-gpt-2.gguf.inp", std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  std::string inp = s.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0, hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    texts.push_back(inp.substr(pos, hit - pos));
  texts.push_back("Café ☕ über 123! 🦙🦙 \xF0\x9F\x98\x81 日本語");
  return texts;
}

std::vector<std::string> all_vocab_paths() {
  std::vector<std::string> paths{kStoriesGguf, kTok512};
  for (const char* name : {"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "falcon", "starcoder"})
    paths.push_back(kOracle + "/vocab/ggml-vocab-" + name + ".gguf");
  return paths;
}

TEST(TokenizerDecode, encode_then_decode_returns_the_text_for_every_vocabulary) {
  auto texts = vector_texts();
  ASSERT_GT(texts.size(), 40u);
  for (const auto& path : all_vocab_paths()) {
    auto tokenizer = load_tokenizer(path);
    for (const auto& text : texts) {
      auto ids = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
      EXPECT_EQ(tokenizer->decode(ids), text) << path;
    }
  }
}

TEST(TokenizerDecode, byte_fallback_pieces_are_raw_bytes) {
  auto tokenizer = load_tokenizer(kTok512);
  // tok512 has no piece for ☕: it falls back to its UTF-8 bytes E2 98 95 (ids byte + 3).
  auto ids = tokenizer->encode("☕", false, false);
  ASSERT_EQ(ids, (std::vector<TokenId>{410, 0xE2 + 3, 0x98 + 3, 0x95 + 3}));
  EXPECT_EQ(tokenizer->token_to_piece(0xE2 + 3), "\xE2");
  EXPECT_EQ(tokenizer->token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(tokenizer->token_to_piece(410), " ");  // SPM ▁ -> space
  EXPECT_EQ(tokenizer->decode(ids), "☕");
}

TEST(TokenizerDecode, special_tokens_are_hidden_unless_asked_for) {
  auto tokenizer = load_tokenizer(kStoriesGguf);
  EXPECT_EQ(tokenizer->token_to_piece(1, /*special=*/false), "");
  EXPECT_EQ(tokenizer->token_to_piece(1, /*special=*/true), "<s>");
  std::vector<TokenId> ids{1, 403, 407, 2};
  EXPECT_EQ(tokenizer->decode(ids), "Once upon");
  DecodeOptions show;
  show.skip_special = false;
  EXPECT_EQ(tokenizer->decode(ids, show), "<s>Once upon</s>");
}

TEST(TokenizerDecode, byte_level_pieces_map_back_to_bytes) {
  auto tokenizer = load_tokenizer(kOracle + "/vocab/ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(tokenizer->vocab().text(995), "\xC4\xA0world");  // "Ġworld"
  EXPECT_EQ(tokenizer->token_to_piece(995), " world");
  EXPECT_EQ(tokenizer->token_to_piece(198), "\n");  // "Ċ"
}

TEST(TokenizerDecode, clean_spaces_is_llama_cpp_cleanup_and_off_by_default) {
  auto tokenizer = load_tokenizer(kOracle + "/vocab/ggml-vocab-gpt-2.gguf");
  auto ids = tokenizer->encode("Hello , world ! it 's", false, false);
  EXPECT_EQ(tokenizer->decode(ids), "Hello , world ! it 's");
  DecodeOptions clean;
  clean.clean_spaces = true;
  EXPECT_EQ(tokenizer->decode(ids, clean), "Hello, world! it's");
}

TEST(TokenizerDecode, special_text_becomes_a_token_only_with_parse_special) {
  auto tokenizer = load_tokenizer(kOracle + "/vocab/ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(tokenizer->encode("<s>Hello", false, /*parse_special=*/true),
            (std::vector<TokenId>{1, 15043}));
  auto plain = tokenizer->encode("<s>Hello", false, /*parse_special=*/false);
  EXPECT_NE(plain.front(), 1);
  EXPECT_EQ(tokenizer->decode(plain), "<s>Hello");
}

TEST(TokenizerDecode, out_of_range_ids_are_refused_with_the_id) {
  auto tokenizer = load_tokenizer(kStoriesGguf);
  std::vector<TokenId> ids{1, 512};
  try {
    tokenizer->decode(ids);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("512"), std::string::npos) << e.what();
  }
  std::vector<TokenId> negative{-1};
  EXPECT_THROW(tokenizer->decode(negative), Error);
}

TEST(TokenizerStreaming, utf8_complete_prefix_holds_back_only_unfinished_characters) {
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("a\xE2"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xE2\x98"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xE2\x98\x95"), 4u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98\x81"), 4u);
  EXPECT_EQ(utf8_complete_prefix("a\x98"), 2u);      // stray continuation: cannot complete, emit
  EXPECT_EQ(utf8_complete_prefix("a\xC3\xA9"), 3u);  // é
}

TEST(TokenizerStreaming, cafe_coffee_fed_one_token_at_a_time) {
  auto tokenizer = load_tokenizer(kTok512);
  auto ids = tokenizer->encode("Café ☕", /*add_special=*/true, false);
  ASSERT_EQ(ids.front(), 1);
  StreamingDecoder stream(*tokenizer);
  std::string text;
  std::vector<std::string> chunks;
  for (TokenId id : ids) {
    std::string chunk = stream.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk)) << "chunk for token " << id << " splits a character";
    chunks.push_back(chunk);
    text += chunk;
  }
  EXPECT_EQ(stream.pending(), 0u);
  text += stream.finish();
  EXPECT_EQ(text, "Café ☕");
  // The three byte tokens of ☕ come last: the first two emit nothing, the third all of it.
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks[chunks.size() - 3], "");
  EXPECT_EQ(chunks[chunks.size() - 2], "");
  EXPECT_EQ(chunks.back(), "☕");
}

TEST(TokenizerStreaming,
     stream_equals_decode_and_chunks_are_whole_characters_for_every_vocabulary) {
  auto texts = vector_texts();
  for (const auto& path : all_vocab_paths()) {
    auto tokenizer = load_tokenizer(path);
    for (const auto& text : texts) {
      auto ids = tokenizer->encode(text, true, false);
      StreamingDecoder stream(*tokenizer);
      std::string streamed;
      for (TokenId id : ids) {
        std::string chunk = stream.push(id);
        EXPECT_TRUE(is_valid_utf8(chunk)) << path << ": token " << id << " in '" << text << "'";
        streamed += chunk;
      }
      streamed += stream.finish();
      EXPECT_EQ(streamed, tokenizer->decode(ids)) << path;
    }
  }
}

TEST(TokenizerStreaming, an_unfinished_character_at_the_end_is_flushed_raw) {
  auto tokenizer = load_tokenizer(kTok512);
  StreamingDecoder stream(*tokenizer);
  EXPECT_EQ(stream.push(0xE2 + 3), "");
  EXPECT_EQ(stream.pending(), 1u);
  EXPECT_EQ(stream.finish(), "\xE2");
  EXPECT_EQ(stream.pending(), 0u);
}

}  // namespace
}  // namespace refit
