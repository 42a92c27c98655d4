#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/merge.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"

namespace refit {

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// std::isspace in the "C" locale, as llama.cpp uses for lstrip/rstrip.
bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// A piece of the input: either raw text still to be tokenized or an already-found token.
struct Fragment {
  TokenId token;          // kNoToken for text
  std::string_view text;  // text fragments only
};

// llama.cpp's tokenizer_st_partition: cut every special token (longest first) out of the
// text fragments. Control and unknown tokens only when parse_special; user-defined (added)
// tokens always, as Hugging Face does.
std::vector<Fragment> partition_special(const Vocab& vocab, std::string_view text,
                                        bool parse_special) {
  std::vector<Fragment> fragments{{kNoToken, text}};
  for (TokenId id : vocab.special_tokens()) {
    if (!parse_special && vocab.type(id) != TokenType::token_type_user_defined) continue;
    const std::string& special = vocab.text(id);
    std::vector<Fragment> next;
    bool changed = false;
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken || f.text.size() < special.size() ||
          f.text.find(special) == std::string_view::npos) {
        next.push_back(f);
        continue;
      }
      changed = true;
      std::string_view rest = f.text;
      for (size_t hit; !rest.empty() && (hit = rest.find(special)) != std::string_view::npos;) {
        std::string_view left = rest.substr(0, hit);
        if (vocab.lstrip(id))
          while (!left.empty() && is_ascii_space(left.back())) left.remove_suffix(1);
        if (!left.empty()) next.push_back({kNoToken, left});
        next.push_back({id, {}});
        rest = rest.substr(hit + special.size());
        if (vocab.rstrip(id))
          while (!rest.empty() && is_ascii_space(rest.front())) rest.remove_prefix(1);
      }
      if (!rest.empty()) next.push_back({kNoToken, rest});
    }
    if (changed) fragments = std::move(next);
  }
  return fragments;
}

// Hugging Face's added-token matching: leftmost-longest over `patterns` (a match at an
// earlier position wins over a longer one later), then lstrip/rstrip widen the match over
// the whitespace next to it. Differs from llama.cpp's longest-token-first only when two
// added tokens overlap in the text.
std::vector<Fragment> partition_leftmost_longest(
    const Vocab& vocab, std::string_view text,
    const std::vector<std::pair<std::string, TokenId>>& patterns) {
  std::vector<Fragment> fragments;
  bool first_byte[256] = {};  // positions no pattern can start at are skipped cheaply
  for (const auto& p : patterns)
    if (!p.first.empty()) first_byte[static_cast<uint8_t>(p.first[0])] = true;
  size_t emitted = 0;
  for (size_t i = 0; i < text.size();) {
    if (!first_byte[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    const std::pair<std::string, TokenId>* best = nullptr;
    for (const auto& p : patterns)  // longest first: the first that matches is the longest
      if (!p.first.empty() && text.compare(i, p.first.size(), p.first) == 0) {
        best = &p;
        break;
      }
    if (!best) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + best->first.size();
    if (vocab.lstrip(best->second))
      while (begin > emitted && is_ascii_space(text[begin - 1])) --begin;
    if (vocab.rstrip(best->second))
      while (end < text.size() && is_ascii_space(text[end])) ++end;
    if (begin > emitted) fragments.push_back({kNoToken, text.substr(emitted, begin - emitted)});
    fragments.push_back({best->second, {}});
    emitted = i = end;
  }
  if (emitted < text.size()) fragments.push_back({kNoToken, text.substr(emitted)});
  return fragments;
}

// Splits SPM text before every `space` (HF Metaspace split=true, "merged with next").
std::vector<std::string_view> split_before_spaces(std::string_view text,
                                                  std::string_view space = kSpmSpace) {
  std::vector<std::string_view> words;
  size_t start = 0;
  for (size_t hit = text.find(space, 1); hit != std::string_view::npos;
       hit = text.find(space, hit + 1)) {
    if (hit > start) words.push_back(text.substr(start, hit - start));
    start = hit;
  }
  if (start < text.size()) words.push_back(text.substr(start));
  return words;
}

// llama.cpp's llama_detokenize clean-up of spaces the tokenizer is assumed to have added,
// in its three passes: " ?" " !" " ." " ,"; a lone " ' "; and " 's" " 'm" " 're" " 've".
std::string clean_up_spaces(const std::string& text) {
  if (text.empty()) return text;
  std::string a(1, text[0]);
  for (size_t i = 1; i < text.size(); ++i) {
    char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a += x;
  }
  std::string b(1, a[0]);
  for (size_t i = 1; i < a.size(); ++i) {
    char x = a[i];
    if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b += x;
      ++i;  // drop the following space too
      continue;
    }
    b += x;
  }
  std::string c(1, b[0]);
  for (size_t i = 1; i < b.size(); ++i) {
    char x = b[i];
    if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      char x1 = b[i + 1];
      char x2 = i + 2 < b.size() ? b[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || (x2 && ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))))
        c.pop_back();
    }
    c += x;
  }
  return c;
}

}  // namespace

Tokenizer::Tokenizer(VocabData data) : vocab_(std::move(data)) {
  if (vocab_.model() == VocabModel::vocab_model_bpe)
    splitter_ = std::make_unique<RegexSplitter>(vocab_.pre_regexes());
  if (!vocab_.hf_pipeline()) return;
  normalizer_ = std::make_unique<Normalizer>(vocab_.normalizer());
  // Raw-text tokens, then tokens matched in normalized text by their normalized spelling (as
  // tokenizers' AddedVocabulary builds its second trie); each list longest first.
  for (TokenId id : vocab_.special_tokens()) {
    // Only tokens listed in added_tokens are matched in text; a model's unk_token that is not
    // one of them (typed unknown by the loader) is never spelled out by tokenizers.
    if (vocab_.type(id) == TokenType::token_type_unknown) continue;
    bool user = vocab_.type(id) == TokenType::token_type_user_defined;
    auto& list = vocab_.normalized(id) ? (user ? normalized_user_ : normalized_all_)
                                       : (user ? raw_user_ : raw_all_);
    list.emplace_back(
        vocab_.normalized(id) ? normalizer_->normalize(vocab_.text(id)) : vocab_.text(id), id);
  }
  // A user-defined token is matched whether or not control tokens are parsed.
  auto merge = [](std::vector<std::pair<std::string, TokenId>>& all,
                  const std::vector<std::pair<std::string, TokenId>>& user) {
    all.insert(all.end(), user.begin(), user.end());
    std::stable_sort(all.begin(), all.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  };
  merge(raw_all_, raw_user_);
  merge(normalized_all_, normalized_user_);
  auto by_length = [](std::vector<std::pair<std::string, TokenId>>& v) {
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  };
  by_length(raw_user_);
  by_length(normalized_user_);
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::check_id(TokenId id) const {
  if (!vocab_.contains(id))
    throw Error(fmt::format("token id {} is outside the vocabulary of {} tokens ({})", id,
                            vocab_.size(), vocab_.source()));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<TokenId> out;
  if (add_special) {
    if (vocab_.add_bos() && vocab_.special_prefix().empty())
      throw Error(
          fmt::format("{}: the vocabulary asks for a BOS token but defines none", vocab_.source()));
    out = vocab_.special_prefix();
  }
  if (!text.empty() && vocab_.hf_pipeline()) {
    encode_hf(text, parse_special, out);
  } else if (!text.empty()) {
    // The SPM dummy prefix goes before the first text fragment and after each special token.
    bool prev_special = true;
    for (const Fragment& f : partition_special(vocab_, text, parse_special)) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
        prev_special = true;
      } else {
        encode_fragment(f.text, prev_special, out);
        prev_special = false;
      }
    }
  }
  if (add_special) {
    if (vocab_.add_eos() && vocab_.special_suffix().empty())
      throw Error(fmt::format("{}: the vocabulary asks for an EOS token but defines none",
                              vocab_.source()));
    out.insert(out.end(), vocab_.special_suffix().begin(), vocab_.special_suffix().end());
  }
  return out;
}

// tokenizers' order: added tokens cut from the raw text; each remaining piece normalized;
// normalized added tokens cut from that; then pre-tokenizer and model per piece.
void Tokenizer::encode_hf(std::string_view text, bool parse_special,
                          std::vector<TokenId>& out) const {
  const auto& raw = parse_special ? raw_all_ : raw_user_;
  const auto& normalized = parse_special ? normalized_all_ : normalized_user_;
  for (const Fragment& f : partition_leftmost_longest(vocab_, text, raw)) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      continue;
    }
    // Metaspace "first" prepends only to the piece that starts at offset 0 of the input.
    bool at_start = f.text.data() == text.data();
    std::string norm = normalizer_->normalize(f.text);
    for (const Fragment& g : partition_leftmost_longest(vocab_, norm, normalized)) {
      if (g.token != kNoToken) {
        out.push_back(g.token);
      } else {
        encode_hf_piece(g.text, at_start && g.text.data() == norm.data(), out);
      }
    }
  }
}

void Tokenizer::encode_hf_piece(std::string_view text, bool at_start,
                                std::vector<TokenId>& out) const {
  if (vocab_.model() == VocabModel::vocab_model_bpe) {
    encode_fragment(text, false, out);  // ByteLevel's prefix space, regex split, merges
    return;
  }
  const std::optional<MetaspaceOptions>& m = vocab_.metaspace();
  if (!m) {  // the normalizer already wrote whatever ▁ the vocabulary expects
    encode_spm(text, out);
    return;
  }
  std::string s = replace_all(text, " ", m->replacement);
  bool prepend =
      m->prepend == PrependScheme::always || (m->prepend == PrependScheme::first && at_start);
  if (prepend && s.rfind(m->replacement, 0) != 0) s.insert(0, m->replacement);
  if (m->split) {
    for (std::string_view word : split_before_spaces(s, m->replacement)) encode_spm(word, out);
  } else {
    encode_spm(s, out);
  }
}

void Tokenizer::encode_fragment(std::string_view text, bool prefix_space,
                                std::vector<TokenId>& out) const {
  if (vocab_.model() == VocabModel::vocab_model_spm) {
    std::string spaced;
    if (vocab_.add_space_prefix() && prefix_space) spaced = " ";
    spaced.append(text);
    std::string escaped = replace_all(spaced, " ", kSpmSpace);
    encode_spm(escaped, out);
  } else {
    std::string prefixed;
    if (vocab_.pre_add_prefix_space() && !text.empty() && text.front() != ' ') {
      prefixed = " ";
      prefixed.append(text);
      text = prefixed;
    }
    for (std::string_view piece : splitter_->split(text)) encode_bpe(byte_level_encode(piece), out);
  }
}

void Tokenizer::encode_spm(std::string_view text, std::vector<TokenId>& out) const {
  const Vocab& v = vocab_;
  std::vector<std::string_view> symbols;
  if (v.has_merges()) {  // HF tokenizer.json: merge order is the merges list
    symbols =
        merge_symbols(text, [&](std::string_view l, std::string_view r) -> std::optional<double> {
          int rank = v.merge_rank(l, r);
          if (rank < 0) return std::nullopt;
          return static_cast<double>(rank);
        });
  } else {  // GGUF / llama2.c: the merged piece with the highest score first
    std::string merged;
    symbols =
        merge_symbols(text, [&](std::string_view l, std::string_view r) -> std::optional<double> {
          merged.assign(l);
          merged.append(r);
          TokenId id = v.find(merged);
          if (id == kNoToken) return std::nullopt;
          return -static_cast<double>(v.score(id));
        });
  }
  for (std::string_view symbol : symbols) {
    TokenId id = v.find(symbol);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // Only single characters can be unknown (every merge result is a token): byte fallback.
    for (char c : symbol) {
      TokenId byte_id = v.byte_token(static_cast<uint8_t>(c));
      if (byte_id == kNoToken) byte_id = v.unk();
      if (byte_id == kNoToken)
        throw Error(fmt::format("{}: character has no token, no <0x{:02X}> byte token and no <unk>",
                                v.source(), static_cast<uint8_t>(c)));
      out.push_back(byte_id);
    }
  }
}

void Tokenizer::encode_bpe(std::string_view piece, std::vector<TokenId>& out) const {
  const Vocab& v = vocab_;
  if (v.ignore_merges()) {
    TokenId id = v.find(piece);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  auto symbols =
      merge_symbols(piece, [&](std::string_view l, std::string_view r) -> std::optional<double> {
        int rank = v.merge_rank(l, r);
        if (rank < 0) return std::nullopt;
        return static_cast<double>(rank);
      });
  for (std::string_view symbol : symbols) {
    TokenId id = v.find(symbol);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // A symbol that is not a token can only be an unmerged character the vocabulary lacks.
    for (size_t i = 0; i < symbol.size();) {
      size_t n = std::min(utf8_sequence_length(static_cast<uint8_t>(symbol[i])), symbol.size() - i);
      TokenId char_id = v.find(symbol.substr(i, n));
      if (char_id == kNoToken) char_id = v.unk();
      if (char_id != kNoToken) out.push_back(char_id);  // llama.cpp drops it silently too
      i += n;
    }
  }
}

std::vector<std::string> Tokenizer::components() const {
  if (!vocab_.components().empty()) return vocab_.components();
  // GGUF / llama2.c: llama.cpp's rules, named by what the file said.
  std::vector<std::string> c;
  if (vocab_.model() == VocabModel::vocab_model_spm) {
    c.push_back(fmt::format("model SentencePiece-style BPE ({})",
                            vocab_.has_merges() ? "merge ranks" : "scores"));
    c.push_back(fmt::format("dummy prefix space {}", vocab_.add_space_prefix() ? "on" : "off"));
  } else {
    c.push_back("model byte-level BPE");
    c.push_back(fmt::format("pre_tokenizer {} ({} regexes)",
                            vocab_.pre_name().empty() ? "default" : vocab_.pre_name(),
                            vocab_.pre_regexes().size()));
  }
  auto name = [&](TokenId id) { return id == kNoToken ? std::string("none") : vocab_.text(id); };
  c.push_back(fmt::format("add_bos {} (bos={}), add_eos {} (eos={})", vocab_.add_bos(),
                          name(vocab_.bos()), vocab_.add_eos(), name(vocab_.eos())));
  return c;
}

std::string Tokenizer::token_to_piece(TokenId id, bool special) const {
  check_id(id);
  const std::string& text = vocab_.text(id);
  switch (vocab_.type(id)) {
    case TokenType::token_type_control:
    case TokenType::token_type_unknown:
      return special ? text : std::string();
    case TokenType::token_type_user_defined:
      return text;
    case TokenType::token_type_byte:
      if (auto b = vocab_.token_byte(id)) return std::string(1, static_cast<char>(*b));
      [[fallthrough]];
    default:
      if (vocab_.model() == VocabModel::vocab_model_spm) return replace_all(text, kSpmSpace, " ");
      return byte_level_decode(text);
  }
}

std::string Tokenizer::piece_for_decode(TokenId id, bool at_text_start,
                                        const DecodeOptions& options) const {
  std::string piece = token_to_piece(id, !options.skip_special);
  // Remove the dummy-prefix space encode() put before the text.
  if (at_text_start && vocab_.add_space_prefix() && !piece.empty() && piece.front() == ' ')
    piece.erase(0, 1);
  return piece;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  std::string text;
  bool at_text_start = true;
  for (TokenId id : ids) {
    check_id(id);
    bool special = vocab_.is_special(id);
    text += piece_for_decode(id, at_text_start && !special, options);
    if (!special) at_text_start = false;
  }
  return options.clean_spaces ? clean_up_spaces(text) : text;
}

size_t utf8_complete_prefix(std::string_view bytes) {
  // Look back at most 3 bytes for the lead byte of an unfinished sequence.
  size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto c = static_cast<uint8_t>(bytes[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = utf8_sequence_length(c);
    if (c >= 0x80 && need > back) return n - back;  // lead byte still waiting for bytes
    return n;
  }
  return n;
}

std::string StreamingDecoder::push(TokenId id) {
  tokenizer_.check_id(id);
  DecodeOptions options = options_;
  options.clean_spaces = false;  // needs the whole text; not available token by token
  bool special = tokenizer_.vocab().is_special(id);
  pending_ += tokenizer_.piece_for_decode(id, at_text_start_ && !special, options);
  if (!special) at_text_start_ = false;
  size_t ready = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string StreamingDecoder::finish() {
  std::string out = std::move(pending_);
  pending_.clear();
  at_text_start_ = true;
  return out;
}

}  // namespace refit
