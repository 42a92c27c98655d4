// Hugging Face tokenizer.json -> VocabData. Only the BPE model is read (byte-level GPT-2 /
// Llama 3 / Qwen style, and SentencePiece-style Llama 2 with byte_fallback); the
// pre-tokenizer is translated into the regex sequence the RegexSplitter runs, so a new
// tokenizer.json of a known shape needs no code change.
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "formats/byte_source.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxTokens = 16u << 20;  // far above any real vocabulary; bounds allocation

[[noreturn]] void hf_fail(const std::string& source, const std::string& message) {
  throw FormatError(fmt::format("{}: {}", source, message));
}

// Regex for an HF Split pattern given as a plain string: quote every character.
std::string quote_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

struct PreTokenizerShape {
  bool byte_level = false;
  bool add_prefix_space = false;
  bool metaspace = false;
  bool metaspace_prepend = false;
  bool metaspace_split = false;
  std::vector<std::string> regexes;
};

void walk_pre_tokenizer(const json& p, const std::string& source, PreTokenizerShape& shape);

void walk_sequence(const json& p, const std::string& source, PreTokenizerShape& shape) {
  if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array())
    hf_fail(source, "tokenizer.json pre_tokenizer Sequence has no \"pretokenizers\" array");
  for (const json& inner : p["pretokenizers"]) walk_pre_tokenizer(inner, source, shape);
}

void walk_byte_level(const json& p, const std::string&, PreTokenizerShape& shape) {
  shape.byte_level = true;
  shape.add_prefix_space = p.value("add_prefix_space", false);
  if (p.value("use_regex", true)) shape.regexes.push_back(gpt2_pre_tokenizer_regex());
}

void walk_split(const json& p, const std::string& source, PreTokenizerShape& shape) {
  std::string behavior = p.value("behavior", "Isolated");
  if (behavior != "Isolated" || p.value("invert", false))
    hf_fail(source,
            fmt::format("tokenizer.json Split pre-tokenizer with behavior '{}'{} is not supported "
                        "(only Isolated, not inverted)",
                        behavior, p.value("invert", false) ? " and invert" : ""));
  const json& pattern = p.value("pattern", json::object());
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
    shape.regexes.push_back(pattern["Regex"].get<std::string>());
  } else if (pattern.contains("String") && pattern["String"].is_string()) {
    shape.regexes.push_back(quote_regex(pattern["String"].get<std::string>()));
  } else {
    hf_fail(source, "tokenizer.json Split pre-tokenizer has no Regex or String pattern");
  }
}

void walk_digits(const json& p, const std::string&, PreTokenizerShape& shape) {
  shape.regexes.push_back(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
}

void walk_punctuation(const json& p, const std::string&, PreTokenizerShape& shape) {
  // HF counts ASCII punctuation and Unicode P* as punctuation.
  std::string behavior = p.value("behavior", "Isolated");
  shape.regexes.push_back(behavior == "Contiguous" ? R"([\p{P}!-/:-@\[-`{-~]+)"
                                                   : R"([\p{P}!-/:-@\[-`{-~])");
}

void walk_metaspace(const json& p, const std::string&, PreTokenizerShape& shape) {
  shape.metaspace = true;
  std::string scheme =
      p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
  shape.metaspace_prepend = scheme != "never";
  shape.metaspace_split = p.value("split", true);
}

// The pre-tokenizer kinds a tokenizer.json may name, and what each adds to the shape.
struct PreTokenizerKind {
  std::string_view type;
  void (*walk)(const json& p, const std::string& source, PreTokenizerShape& shape);
};
constexpr PreTokenizerKind kPreTokenizerKinds[] = {
    {"Sequence", walk_sequence}, {"ByteLevel", walk_byte_level},    {"Split", walk_split},
    {"Digits", walk_digits},     {"Punctuation", walk_punctuation}, {"Metaspace", walk_metaspace},
};

void walk_pre_tokenizer(const json& p, const std::string& source, PreTokenizerShape& shape) {
  if (p.is_null()) return;
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
    hf_fail(source, "tokenizer.json pre_tokenizer is not an object with a \"type\"");
  const std::string type = p["type"];
  for (const PreTokenizerKind& kind : kPreTokenizerKinds)
    if (kind.type == type) return kind.walk(p, source, shape);
  hf_fail(source, fmt::format("tokenizer.json pre-tokenizer '{}' is not supported", type));
}

// Llama 2's SentencePiece emulation: normalizer Sequence[Prepend("▁"), Replace(" ", "▁")].
void walk_normalizer(const json& n, bool& prepend, bool& replaces_space) {
  if (!n.is_object()) return;
  std::string type = n.value("type", "");
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (const json& inner : n["normalizers"]) walk_normalizer(inner, prepend, replaces_space);
  } else if (type == "Prepend") {
    prepend = true;
  } else if (type == "Replace") {
    const json& pattern = n.value("pattern", json::object());
    if (pattern.value("String", "") == " ") replaces_space = true;
  }
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

// Byte-level BPE or SentencePiece-style BPE, from the pre-tokenizer, normalizer and decoder.
void choose_bpe_kind(const json& tj, bool byte_fallback, const std::string& source, VocabData& d) {
  PreTokenizerShape shape;
  walk_pre_tokenizer(tj.value("pre_tokenizer", json()), source, shape);
  bool prepend = false, replaces_space = false;
  walk_normalizer(tj.value("normalizer", json()), prepend, replaces_space);
  bool decoder_byte_level = tj.contains("decoder") && tj["decoder"].is_object() &&
                            tj["decoder"].dump().find("\"ByteLevel\"") != std::string::npos;

  if (shape.byte_level || decoder_byte_level) {
    d.model = VocabModel::vocab_model_bpe;
    d.pre_regexes = shape.regexes;
    // No regex at all: the whole text is one piece.
    if (d.pre_regexes.empty()) d.pre_regexes.push_back(R"([\s\S]+)");
    d.pre_add_prefix_space = shape.add_prefix_space;
  } else if (shape.metaspace || replaces_space || byte_fallback) {
    d.model = VocabModel::vocab_model_spm;
    d.add_space_prefix = shape.metaspace ? shape.metaspace_prepend : prepend;
    d.spm_split_words = shape.metaspace && shape.metaspace_split;
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
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
      d.add_bos = config["add_bos_token"].get<bool>();
    if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean())
      d.add_eos = config["add_eos_token"].get<bool>();
    if (config.contains("clean_up_tokenization_spaces") &&
        config["clean_up_tokenization_spaces"].is_boolean())
      d.clean_spaces = config["clean_up_tokenization_spaces"].get<bool>();
  }
}

// Llama 3 style: no add_bos_token, but the post-processor template starts with BOS.
void bos_from_post_processor(const json& tj, VocabData& d) {
  const json& post = tj.value("post_processor", json());
  if (!d.add_bos && post.is_object() && post.value("type", "") == "TemplateProcessing" &&
      post.contains("single") && post["single"].is_array() && !post["single"].empty()) {
    const json& first = post["single"][0];
    if (first.contains("SpecialToken") && first["SpecialToken"].contains("id") &&
        first["SpecialToken"]["id"].is_string()) {
      TokenId id = id_of(d, first["SpecialToken"]["id"].get<std::string>());
      if (id != kNoToken) {
        d.add_bos = true;
        if (d.bos == kNoToken) d.bos = id;
      }
    }
  }
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
  bos_from_post_processor(tj, d);
  if (!d.add_bos) d.add_bos = d.model == VocabModel::vocab_model_spm && d.bos != kNoToken;
  return d;
}

}  // namespace refit
