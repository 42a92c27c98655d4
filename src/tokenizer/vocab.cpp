#include "tokenizer/vocab.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

namespace refit {

namespace {

[[noreturn]] void vocab_fail(const std::string& source, const std::string& message) {
  throw FormatError(
      fmt::format("{}: tokenizer: {}", source.empty() ? "<vocabulary>" : source, message));
}

// "<0x1F>" -> 0x1F; nullopt when `text` is not exactly a byte-token spelling.
std::optional<uint8_t> parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(text[3]), lo = hex(text[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

}  // namespace

std::string Vocab::merge_key(std::string_view left, std::string_view right) {
  // Length-prefixed so that ("ab","c") and ("a","bc") never collide, whatever bytes the
  // tokens contain.
  std::string key = std::to_string(left.size());
  key += ':';
  key.append(left);
  key.append(right);
  return key;
}

Vocab::Vocab(VocabData data)
    : source_(std::move(data.source)),
      model_(data.model),
      tokens_(std::move(data.tokens)),
      scores_(std::move(data.scores)),
      pre_name_(std::move(data.pre_name)),
      pre_regexes_(std::move(data.pre_regexes)),
      pre_add_prefix_space_(data.pre_add_prefix_space),
      hf_pipeline_(data.hf_pipeline),
      normalizer_(std::move(data.normalizer)),
      metaspace_(std::move(data.metaspace)),
      components_(std::move(data.components)),
      bos_(data.bos),
      eos_(data.eos),
      unk_(data.unk),
      pad_(data.pad) {
  const size_t n = tokens_.size();
  if (n == 0) vocab_fail(source_, "the vocabulary has no tokens");
  if (n > static_cast<size_t>(INT32_MAX))
    vocab_fail(source_, fmt::format("{} tokens is too many", n));
  if (!scores_.empty() && scores_.size() != n)
    vocab_fail(source_, fmt::format("{} scores for {} tokens", scores_.size(), n));
  if (!data.types.empty() && data.types.size() != n)
    vocab_fail(source_, fmt::format("{} token types for {} tokens", data.types.size(), n));
  types_ = data.types.empty() ? std::vector<TokenType>(n, TokenType::token_type_normal)
                              : std::move(data.types);

  // Special ids out of range are dropped rather than trusted (llama.cpp warns and keeps its
  // default); a missing BOS is only an error when BOS must be added (checked at encode).
  for (TokenId* id : {&bos_, &eos_, &unk_, &pad_})
    if (*id != kNoToken && !contains(*id)) *id = kNoToken;

  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    // An empty token could never be produced and would match everywhere when splitting
    // special tokens; llama.cpp renames it the same way.
    if (tokens_[i].empty()) tokens_[i] = fmt::format("[EMPTY_{}]", i);
    token_to_id_[tokens_[i]] = static_cast<TokenId>(i);  // a later duplicate wins, as in llama.cpp
  }

  if (model_ == VocabModel::vocab_model_bpe && data.merges.empty())
    vocab_fail(source_, "byte-level BPE vocabulary has no merges");
  merge_ranks_.reserve(data.merges.size());
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    const auto& [left, right] = data.merges[rank];
    merge_ranks_.emplace(merge_key(left, right), static_cast<int>(rank));  // first rank wins
  }

  std::fill(std::begin(byte_tokens_), std::end(byte_tokens_), kNoToken);
  if (model_ == VocabModel::vocab_model_spm) {
    for (int b = 0; b < 256; ++b) {
      TokenId id = find(fmt::format("<0x{:02X}>", b));
      if (id == kNoToken) id = find(std::string(1, static_cast<char>(b)));
      byte_tokens_[b] = id;
    }
  }

  flags_.assign(n, 0);
  for (TokenId id : data.lstrip_tokens)
    if (contains(id)) flags_[static_cast<size_t>(id)] |= kLstrip;
  for (TokenId id : data.rstrip_tokens)
    if (contains(id)) flags_[static_cast<size_t>(id)] |= kRstrip;
  for (TokenId id : data.normalized_tokens)
    if (contains(id)) flags_[static_cast<size_t>(id)] |= kNormalized;

  for (size_t i = 0; i < n; ++i) {
    TokenType t = types_[i];
    if (t == TokenType::token_type_control || t == TokenType::token_type_user_defined ||
        t == TokenType::token_type_unknown)
      special_tokens_.push_back(static_cast<TokenId>(i));
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](TokenId a, TokenId b) { return text(a).size() > text(b).size(); });

  if (model_ == VocabModel::vocab_model_spm) {
    add_bos_ = data.add_bos.value_or(true);
    add_eos_ = data.add_eos.value_or(false);
    add_space_prefix_ = data.add_space_prefix.value_or(true);
    ignore_merges_ = data.ignore_merges.value_or(false);
    clean_spaces_ = data.clean_spaces.value_or(false);
  } else {
    PreTokenizerPreset preset;
    if (pre_regexes_.empty()) {
      preset = pre_tokenizer_preset(pre_name_, source_);
      pre_regexes_ = preset.regexes;
    } else {
      preset.add_bos = false;
      preset.clean_spaces = false;  // an HF tokenizer.json says what its decoder does
    }
    add_bos_ = data.add_bos.value_or(preset.add_bos);
    add_eos_ = data.add_eos.value_or(false);
    add_space_prefix_ = data.add_space_prefix.value_or(false);
    ignore_merges_ = data.ignore_merges.value_or(preset.ignore_merges);
    clean_spaces_ = data.clean_spaces.value_or(preset.clean_spaces);
  }

  // An explicit post-processor (HF) says exactly what to add; otherwise BOS/EOS by the flags.
  // A flag whose token is missing stays set with nothing to add: encode() refuses it then.
  auto checked = [&](std::vector<TokenId> ids, const char* what) {
    for (TokenId id : ids)
      if (!contains(id))
        vocab_fail(source_, fmt::format("{} token id {} is out of range", what, id));
    return ids;
  };
  if (data.special_prefix) {
    special_prefix_ = checked(std::move(*data.special_prefix), "post-processor");
    add_bos_ = !special_prefix_.empty();
  } else if (add_bos_ && bos_ != kNoToken) {
    special_prefix_ = {bos_};
  }
  if (data.special_suffix) {
    special_suffix_ = checked(std::move(*data.special_suffix), "post-processor");
    add_eos_ = !special_suffix_.empty();
  } else if (add_eos_ && eos_ != kNoToken) {
    special_suffix_ = {eos_};
  }
}

TokenId Vocab::find(std::string_view text) const {
  auto it = token_to_id_.find(std::string(text));
  return it == token_to_id_.end() ? kNoToken : it->second;
}

int Vocab::merge_rank(std::string_view left, std::string_view right) const {
  auto it = merge_ranks_.find(merge_key(left, right));
  return it == merge_ranks_.end() ? -1 : it->second;
}

std::optional<uint8_t> Vocab::token_byte(TokenId id) const {
  if (!contains(id)) return std::nullopt;
  if (type(id) != TokenType::token_type_byte) return std::nullopt;
  return parse_byte_token(text(id));
}

}  // namespace refit
