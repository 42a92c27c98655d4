// Hugging Face tokenizer.json -> VocabData. Only the BPE model is read (byte-level GPT-2 /
// Llama 3 / Qwen style, and SentencePiece-style Llama 2 / Mistral with byte_fallback). The
// components are translated into data the encoder runs the way tokenizers 0.23 runs them:
// normalizer (normalizer.h), pre-tokenizer (hf_pre_tokenizer.h), post-processor and the
// tokenizer_config.json add_bos_token / add_eos_token flags (post_processor.h); the decoder is
// only checked. Every component type refit cannot run exactly is refused by name.
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "formats/byte_source.h"
#include "tokenizer/hf_pre_tokenizer.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxTokens = 16u << 20;  // far above any real vocabulary; bounds allocation

[[noreturn]] void hf_fail(const std::string& source, const std::string& message) {
  throw FormatError(fmt::format("{}: {}", source, message));
}

// tokenizer.json "decoder": only checked (refit's decode() is the same for every decoder it
// accepts: byte-level, or ▁ -> ' ' with byte fallback), so an unknown one is refused rather
// than decoded differently. Returns its description.
std::string walk_decoder(const json& p, const std::string& source, int depth = 0) {
  if (p.is_null()) return "none";
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string() || depth > 64)
    hf_fail(source, "tokenizer.json decoder is not an object with a \"type\"");
  const std::string type = p["type"];
  if (type == "Sequence") {
    if (!p.contains("decoders") || !p["decoders"].is_array())
      hf_fail(source, "tokenizer.json decoder Sequence has no \"decoders\" array");
    std::vector<std::string> parts;
    for (const json& inner : p["decoders"]) parts.push_back(walk_decoder(inner, source, depth + 1));
    return fmt::format("Sequence[{}]", fmt::join(parts, ", "));
  }
  for (const char* known : {"ByteLevel", "Metaspace", "Replace", "ByteFallback", "Fuse", "Strip"})
    if (type == known) return type;
  hf_fail(source, fmt::format("tokenizer.json decoder '{}' is not supported (refit decodes "
                              "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and "
                              "Sequence)",
                              type));
}

// A token given as "text" or {"content": "text"} in tokenizer_config.json.
std::optional<std::string> token_text(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

// id -> text, with room for added tokens that lie beyond the model vocabulary.
struct TokenTable {
  std::vector<std::string> tokens;
  std::vector<bool> present;

  void place(int64_t id, const std::string& text, const char* where, const std::string& source) {
    if (id < 0 || static_cast<uint64_t>(id) >= kMaxTokens)
      hf_fail(source, fmt::format("{} token '{}' has id {} outside [0, {})", where, printable(text),
                                  id, kMaxTokens));
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(static_cast<size_t>(id) + 1);
      present.resize(static_cast<size_t>(id) + 1, false);
    }
    tokens[static_cast<size_t>(id)] = text;
    present[static_cast<size_t>(id)] = true;
  }
};

// tokenizer.json's "model", checked to be a BPE model with a vocabulary.
const json& bpe_model(const json& tj, const std::string& source) {
  if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object())
    hf_fail(source, "tokenizer.json has no \"model\" object");
  const json& model = tj["model"];
  std::string type = model.value("type", "BPE");  // old files omit it for BPE
  if (type != "BPE")
    hf_fail(source,
            fmt::format("tokenizer.json model type '{}' is not supported (only BPE)", type));
  if (!model.contains("vocab") || !model["vocab"].is_object())
    hf_fail(source, "tokenizer.json model has no \"vocab\" object");
  return model;
}

void read_model_vocab(const json& model, const std::string& source, TokenTable& table) {
  if (model["vocab"].size() > kMaxTokens)
    hf_fail(source, "tokenizer.json vocabulary is absurdly large");
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer())
      hf_fail(source,
              fmt::format("tokenizer.json vocab entry '{}' has a non-integer id", printable(text)));
    table.place(id.get<int64_t>(), text, "tokenizer.json vocab", source);
  }
}

void read_merges(const json& model, const std::string& source, VocabData& d) {
  if (!model.contains("merges") || !model["merges"].is_array()) return;
  for (const json& merge : model["merges"]) {
    if (merge.is_string()) {  // "left right"
      const std::string s = merge.get<std::string>();
      size_t pos = s.find(' ', 1);
      if (pos == std::string::npos)
        hf_fail(source, fmt::format("tokenizer.json merge '{}' has no space", printable(s)));
      d.merges.emplace_back(s.substr(0, pos), s.substr(pos + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      d.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      hf_fail(source, "tokenizer.json merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
}

bool has_step(const std::vector<NormalizerStep>& steps, NormalizerStep::Kind kind) {
  for (const NormalizerStep& s : steps)
    if (s.kind == kind) return true;
  return false;
}

bool replaces_space(const std::vector<NormalizerStep>& steps) {
  for (const NormalizerStep& s : steps)
    if (s.kind == NormalizerStep::Kind::replace && !s.regex && s.pattern == " ") return true;
  return false;
}

// Byte-level BPE or SentencePiece-style BPE, from the pre-tokenizer, normalizer and decoder;
// the normalizer and Metaspace then run as tokenizers runs them (hf_pipeline).
void choose_bpe_kind(const json& tj, bool byte_fallback, const std::string& source, VocabData& d) {
  HfPreTokenizer shape = pre_tokenizer_from_hf(tj.value("pre_tokenizer", json()), source);
  d.normalizer = normalizer_from_hf(tj.value("normalizer", json()), source);
  std::string decoder = walk_decoder(tj.value("decoder", json()), source);
  bool decoder_byte_level = decoder.find("ByteLevel") != std::string::npos;
  d.hf_pipeline = true;
  d.components.push_back("normalizer " +
                         (d.normalizer.empty() ? "none" : describe_normalizer(d.normalizer)));
  d.components.push_back("pre_tokenizer " + shape.description);
  d.components.push_back("decoder " + decoder);

  if (shape.byte_level || decoder_byte_level) {
    if (shape.metaspace)
      hf_fail(source, "tokenizer.json combines a Metaspace pre-tokenizer with a ByteLevel decoder");
    d.model = VocabModel::vocab_model_bpe;
    d.pre_regexes = shape.regexes;
    // No regex at all: the whole text is one piece.
    if (d.pre_regexes.empty()) d.pre_regexes.push_back(R"([\s\S]+)");
    d.pre_add_prefix_space = shape.add_prefix_space;
  } else if (shape.metaspace || replaces_space(d.normalizer) || byte_fallback) {
    if (!shape.regexes.empty())
      hf_fail(source,
              fmt::format("tokenizer.json pre_tokenizer {} splits text for a SentencePiece-style "
                          "vocabulary, which is not supported",
                          shape.description));
    d.model = VocabModel::vocab_model_spm;
    d.metaspace = shape.metaspace;
    // Decoding drops the leading space that encoding put in front of the text.
    d.add_space_prefix = shape.metaspace ? shape.metaspace->prepend != PrependScheme::never
                                         : has_step(d.normalizer, NormalizerStep::Kind::prepend);
  } else {
    hf_fail(source,
            "tokenizer.json is neither byte-level BPE (ByteLevel pre-tokenizer/decoder) nor "
            "SentencePiece-style BPE (Metaspace, or a ' ' -> U+2581 normalizer)");
  }
}

// Added tokens: special ones are control tokens (hidden when decoding, parsed only on
// request); the others are user-defined and always split out of the text. Returns the type
// of every id (undefined: not an added token).
std::vector<TokenType> read_added_tokens(const json& tj, const std::string& source,
                                         TokenTable& table, VocabData& d) {
  std::vector<TokenType> added_type(table.tokens.size(), TokenType::token_type_undefined);
  if (!tj.contains("added_tokens") || !tj["added_tokens"].is_array()) return added_type;
  for (const json& t : tj["added_tokens"]) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string())
      hf_fail(source,
              "tokenizer.json added_tokens entry needs an integer \"id\" and a string \"content\"");
    int64_t id = t["id"].get<int64_t>();
    table.place(id, t["content"].get<std::string>(), "tokenizer.json added_tokens", source);
    added_type.resize(table.tokens.size(), TokenType::token_type_undefined);
    added_type[static_cast<size_t>(id)] = t.value("special", false)
                                              ? TokenType::token_type_control
                                              : TokenType::token_type_user_defined;
    if (t.value("lstrip", false)) d.lstrip_tokens.push_back(static_cast<TokenId>(id));
    if (t.value("rstrip", false)) d.rstrip_tokens.push_back(static_cast<TokenId>(id));
    // tokenizers' default: special tokens match the raw text, others the normalized text.
    if (t.value("normalized", !t.value("special", false)))
      d.normalized_tokens.push_back(static_cast<TokenId>(id));
  }
  return added_type;
}

void fill_tokens(TokenTable& table, const std::vector<TokenType>& added_type, bool byte_fallback,
                 VocabData& d) {
  d.tokens.resize(table.tokens.size());
  d.types.resize(table.tokens.size());
  for (size_t i = 0; i < table.tokens.size(); ++i) {
    if (!table.present[i]) {  // a hole in the id space: never produced, never matched
      d.tokens[i] = fmt::format("[UNUSED_{}]", i);
      d.types[i] = TokenType::token_type_unused;
      continue;
    }
    d.tokens[i] = std::move(table.tokens[i]);
    if (added_type[i] != TokenType::token_type_undefined) {
      d.types[i] = added_type[i];
    } else if (byte_fallback && d.model == VocabModel::vocab_model_spm && d.tokens[i].size() == 6 &&
               d.tokens[i].rfind("<0x", 0) == 0 && d.tokens[i][5] == '>') {
      d.types[i] = TokenType::token_type_byte;
    } else {
      d.types[i] = TokenType::token_type_normal;
    }
  }
}

size_t added_count(const json& tj) {
  return tj.contains("added_tokens") && tj["added_tokens"].is_array() ? tj["added_tokens"].size()
                                                                      : 0;
}

TokenId id_of(const VocabData& d, const std::optional<std::string>& text) {
  if (!text) return kNoToken;
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (d.tokens[i] == *text) return static_cast<TokenId>(i);
  return kNoToken;
}

// BOS/EOS/PAD/UNK and the add_* flags from tokenizer_config.json (the model's unk_token
// when the config names none).
void read_special_tokens(const json& model, const json& config, VocabData& d) {
  d.bos = id_of(d, token_text(config, "bos_token"));
  d.eos = id_of(d, token_text(config, "eos_token"));
  d.pad = id_of(d, token_text(config, "pad_token"));
  d.unk = id_of(d, token_text(config, "unk_token"));
  if (d.unk == kNoToken && model.contains("unk_token") && model["unk_token"].is_string())
    d.unk = id_of(d, model["unk_token"].get<std::string>());
  if (d.unk != kNoToken && d.types[static_cast<size_t>(d.unk)] == TokenType::token_type_normal)
    d.types[static_cast<size_t>(d.unk)] = TokenType::token_type_unknown;
  if (config.is_object()) {
    if (config.contains("clean_up_tokenization_spaces") &&
        config["clean_up_tokenization_spaces"].is_boolean())
      d.clean_spaces = config["clean_up_tokenization_spaces"].get<bool>();
  }
}

// tokenizer_config.json classes whose transformers tokenizer rebuilds the post-processor from
// add_bos_token (default true) / add_eos_token even when the config does not set them.
bool rebuilds_template_always(const json& config) {
  if (!config.is_object() || !config.contains("tokenizer_class") ||
      !config["tokenizer_class"].is_string())
    return false;
  const std::string cls = config["tokenizer_class"];
  for (const char* c : {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                        "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"})
    if (cls == c) return true;
  return false;
}

std::optional<bool> config_flag(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  return config[key].is_boolean() && config[key].get<bool>();  // null counts as false
}

// What encode(add_special=true) adds: the post-processor's tokens (at any depth of a
// Sequence, as Llama 3 nests its TemplateProcessing), unless tokenizer_config.json's
// add_bos_token / add_eos_token make transformers rebuild the template.
void special_wrap(const json& tj, const json& config, const std::string& source, VocabData& d) {
  SpecialTokenWrap wrap =
      post_processor_from_hf(tj.value("post_processor", json()), d.tokens, source);
  // No bos_token/eos_token in the config: the template's own tokens are the BOS/EOS.
  if (d.bos == kNoToken && !wrap.prefix.empty()) d.bos = wrap.prefix.front();
  if (d.eos == kNoToken && !wrap.suffix.empty()) d.eos = wrap.suffix.back();
  std::optional<bool> add_bos = config_flag(config, "add_bos_token");
  std::optional<bool> add_eos = config_flag(config, "add_eos_token");
  bool always = rebuilds_template_always(config);
  if (add_bos || add_eos || always)
    apply_bos_eos_flags(add_bos, add_eos, /*default_add_bos=*/always, d.bos, d.eos, d.tokens, wrap);
  d.special_prefix = wrap.prefix;
  d.special_suffix = wrap.suffix;
  d.components.push_back("post_processor " + wrap.description);
}

}  // namespace

VocabData vocab_from_hf(const json& tj, const json& config, const std::string& source) {
  VocabData d;
  d.source = source;
  const json& model = bpe_model(tj, source);
  TokenTable table;
  read_model_vocab(model, source, table);
  read_merges(model, source, d);
  bool byte_fallback = model.value("byte_fallback", false);
  if (model.contains("ignore_merges") && model["ignore_merges"].is_boolean())
    d.ignore_merges = model["ignore_merges"].get<bool>();
  choose_bpe_kind(tj, byte_fallback, source, d);
  const std::vector<TokenType> added_type = read_added_tokens(tj, source, table, d);
  fill_tokens(table, added_type, byte_fallback, d);
  read_special_tokens(model, config, d);
  special_wrap(tj, config, source, d);
  d.components.insert(d.components.begin(),
                      d.model == VocabModel::vocab_model_bpe
                          ? "model BPE (byte-level)"
                          : fmt::format("model BPE (SentencePiece-style{})",
                                        byte_fallback ? ", byte_fallback" : ""));
  d.components.push_back(
      fmt::format("added_tokens {} ({} normalized)", added_count(tj), d.normalized_tokens.size()));
  return d;
}

}  // namespace refit
