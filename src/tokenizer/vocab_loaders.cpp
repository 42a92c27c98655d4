#include "tokenizer/vocab_loaders.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/llama2c.h"

namespace refit {

namespace {

// A special-token id key: absent, or 0xFFFFFFFF / negative (how converters write "none"),
// gives kNoToken. Out-of-range ids are dropped later by Vocab.
TokenId gguf_token_id(const GgufMetadata& m, std::string_view key, TokenId fallback) {
  const GgufValue* v = m.find(key);
  if (!v) return fallback;
  if (!v->is_integer())
    throw FormatError(
        fmt::format("{}: {} should be an integer token id, is {}", m.path(), key, v->type_str()));
  bool is_unsigned = v->type() == GgufValueType::u8 || v->type() == GgufValueType::u16 ||
                     v->type() == GgufValueType::u32 || v->type() == GgufValueType::u64;
  if (is_unsigned) {
    uint64_t u = v->as_u64();
    return u >= static_cast<uint64_t>(INT32_MAX) ? kNoToken : static_cast<TokenId>(u);
  }
  int64_t i = v->as_i64();
  return (i < 0 || i >= INT32_MAX) ? kNoToken : static_cast<TokenId>(i);
}

TokenType token_type_from_int(int32_t t) {
  return (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::token_type_undefined;
}

bool is_byte_piece(std::string_view s) {
  return s.size() == 6 && s.substr(0, 3) == "<0x" && s[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>(s[3])) &&
         std::isxdigit(static_cast<unsigned char>(s[4]));
}

}  // namespace

VocabData vocab_from_gguf(const GgufMetadata& m) {
  VocabData d;
  d.source = m.path();
  std::string model = m.require_string("tokenizer.ggml.model");
  if (model == "llama") {
    d.model = VocabModel::vocab_model_spm;
  } else if (model == "gpt2") {
    d.model = VocabModel::vocab_model_bpe;
  } else {
    throw FormatError(fmt::format(
        "{}: tokenizer.ggml.model '{}' is not supported (refit reads 'llama' SentencePiece and "
        "'gpt2' byte-level BPE vocabularies)",
        m.path(), model));
  }
  const std::vector<std::string>* tokens = m.find_array_strings("tokenizer.ggml.tokens");
  if (!tokens)
    throw FormatError(
        fmt::format("{}: tokenizer.ggml.tokens is missing or not an array of strings", m.path()));
  d.tokens = *tokens;
  if (m.has("tokenizer.ggml.scores")) d.scores = m.require_array_f32("tokenizer.ggml.scores");
  if (m.has("tokenizer.ggml.token_type")) {
    for (int32_t t : m.require_array_i32("tokenizer.ggml.token_type"))
      d.types.push_back(token_type_from_int(t));
  }
  if (d.model == VocabModel::vocab_model_bpe) {
    const std::vector<std::string>* merges = m.find_array_strings("tokenizer.ggml.merges");
    if (!merges)
      throw FormatError(fmt::format(
          "{}: tokenizer.ggml.merges is missing (needed by a gpt2 vocabulary)", m.path()));
    d.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string& merge = (*merges)[i];
      // Split at the first space after the first character: a token may itself be a space.
      size_t pos = merge.find(' ', 1);
      if (pos == std::string::npos)
        throw FormatError(
            fmt::format("{}: tokenizer.ggml.merges[{}] = '{}' has no space between its two tokens",
                        m.path(), i, printable(merge)));
      d.merges.emplace_back(merge.substr(0, pos), merge.substr(pos + 1));
    }
    d.pre_name = m.get_string("tokenizer.ggml.pre").value_or("default");
  }
  // llama.cpp's defaults for SentencePiece vocabularies without the keys.
  bool spm = d.model == VocabModel::vocab_model_spm;
  d.bos = gguf_token_id(m, "tokenizer.ggml.bos_token_id", spm ? 1 : kNoToken);
  d.eos = gguf_token_id(m, "tokenizer.ggml.eos_token_id", spm ? 2 : kNoToken);
  d.unk = gguf_token_id(m, "tokenizer.ggml.unknown_token_id", spm ? 0 : kNoToken);
  d.pad = gguf_token_id(m, "tokenizer.ggml.padding_token_id", kNoToken);
  d.add_bos = m.get_bool("tokenizer.ggml.add_bos_token");
  d.add_eos = m.get_bool("tokenizer.ggml.add_eos_token");
  d.add_space_prefix = m.get_bool("tokenizer.ggml.add_space_prefix");

  // GGUF has no per-token lstrip/rstrip; llama.cpp restores Phi-3's from the model name
  // (its added tokens swallow the whitespace after them), and so does refit.
  std::string name = m.get_string("general.name").value_or("");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (size_t i = 0; i < d.tokens.size() && i < d.types.size(); ++i) {
      TokenType t = d.types[i];
      const std::string& text = d.tokens[i];
      bool special = t == TokenType::token_type_control ||
                     t == TokenType::token_type_user_defined || t == TokenType::token_type_unknown;
      if ((special || text == "</s>") && text != "<unk>" && text != "<s>" &&
          text != "<|endoftext|>")
        d.rstrip_tokens.push_back(static_cast<TokenId>(i));
    }
  }
  return d;
}

VocabData vocab_from_llama2c(const Llama2cTokenizerData& data, const std::string& source) {
  VocabData d;
  d.source = source;
  d.model = VocabModel::vocab_model_spm;
  d.scores = data.scores;
  d.tokens.reserve(data.pieces.size());
  d.types.reserve(data.pieces.size());
  for (size_t i = 0; i < data.pieces.size(); ++i) {
    const std::string& piece = data.pieces[i];
    auto id = static_cast<TokenId>(i);
    if (piece == "<unk>") {
      d.tokens.push_back(piece);
      d.types.push_back(TokenType::token_type_unknown);
      d.unk = id;
    } else if (piece == "\n<s>\n" || piece == "<s>") {
      d.tokens.push_back("<s>");
      d.types.push_back(TokenType::token_type_control);
      d.bos = id;
    } else if (piece == "\n</s>\n" || piece == "</s>") {
      d.tokens.push_back("</s>");
      d.types.push_back(TokenType::token_type_control);
      d.eos = id;
    } else if (is_byte_piece(piece)) {
      d.tokens.push_back(piece);
      d.types.push_back(TokenType::token_type_byte);
    } else {
      // llama2.c's export replaced SentencePiece's ▁ by ' '; put it back. A piece that
      // already uses ▁ is kept as it is, so both conventions load the same way.
      std::string text;
      for (char c : piece) {
        if (c == ' ')
          text += "\xE2\x96\x81";
        else
          text += c;
      }
      d.tokens.push_back(std::move(text));
      d.types.push_back(TokenType::token_type_normal);
    }
  }
  d.add_bos = true;
  d.add_eos = false;
  d.add_space_prefix = true;
  return d;
}

std::string tokenize_for_cli(const Tokenizer& tokenizer, const std::string& text, bool no_bos,
                             bool parse_special) {
  std::vector<TokenId> ids = tokenizer.encode(text, !no_bos, parse_special);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

std::string detokenize_for_cli(const Tokenizer& tokenizer, const std::string& ids_text) {
  std::vector<TokenId> ids;
  std::string current;
  auto flush = [&] {
    if (current.empty()) return;
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(current, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != current.size() || value < 0 || value > INT32_MAX)
      throw Error(
          fmt::format("--decode: '{}' is not a token id (expected integers separated by spaces)",
                      printable(current)));
    ids.push_back(static_cast<TokenId>(value));
    current.clear();
  };
  for (char c : ids_text) {
    if (c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r' || c == '[' || c == ']') {
      flush();
    } else {
      current += c;
    }
  }
  flush();
  return tokenizer.decode(ids);
}

}  // namespace refit
