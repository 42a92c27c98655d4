#include "synthetic/synthetic_vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "formats/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace refit {

namespace {

constexpr std::string_view kBoundary = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, "▁"

// Frequent English words (story-book register, like the TinyStories vocabularies) and
// subwords. Each becomes "▁word" (and capitalised sentence starts for a few); suffixes are
// also added without the marker so that inflected words split naturally.
constexpr std::string_view kWords[] = {
    "the",     "and",    "to",      "a",         "was",       "he",      "she",        "it",
    "of",      "in",     "they",    "his",       "her",       "that",    "with",       "you",
    "said",    "for",    "on",      "is",        "but",       "had",     "one",        "day",
    "so",      "were",   "we",      "play",      "very",      "big",     "time",       "once",
    "upon",    "there",  "little",  "girl",      "boy",       "named",   "lily",       "tim",
    "ben",     "mom",    "dad",     "saw",       "went",      "what",    "not",        "at",
    "be",      "all",    "as",      "have",      "this",      "are",     "from",       "by",
    "or",      "an",     "can",     "will",      "do",        "my",      "me",         "him",
    "them",    "their",  "about",   "up",        "out",       "if",      "then",       "when",
    "into",    "no",     "yes",     "happy",     "sad",       "friend",  "friends",    "want",
    "wanted",  "like",   "liked",   "love",      "loved",     "go",      "see",        "look",
    "looked",  "help",   "helped",  "came",      "come",      "get",     "got",        "made",
    "make",    "new",    "old",     "good",      "bad",       "sun",     "sky",        "tree",
    "park",    "ball",   "dog",     "cat",       "bird",      "fish",    "house",      "home",
    "toy",     "toys",   "car",     "red",       "blue",      "green",   "small",      "fun",
    "run",     "ran",    "jump",    "find",      "found",     "felt",    "feel",       "could",
    "would",   "should", "because", "after",     "before",    "again",   "every",      "some",
    "other",   "many",   "more",    "most",      "too",       "also",    "how",        "why",
    "who",     "where",  "here",    "now",       "just",      "know",    "knew",       "think",
    "thought", "say",    "tell",    "told",      "ask",       "asked",   "give",       "gave",
    "take",    "took",   "put",     "let",       "lets",      "way",     "back",       "down",
    "over",    "under",  "away",    "around",    "through",   "each",    "than",       "only",
    "first",   "last",   "long",    "great",     "world",     "people",  "water",      "food",
    "eat",     "ate",    "school",  "work",      "year",      "years",   "hand",       "hands",
    "eyes",    "head",   "door",    "room",      "car",       "night",   "morning",    "light",
    "dark",    "hello",  "thank",   "thanks",    "please",    "sorry",   "best",       "quick",
    "brown",   "fox",    "lazy",    "over",      "number",    "one",     "two",        "three",
    "four",    "five",   "which",   "there",     "these",     "those",   "been",       "has",
    "did",     "does",   "into",    "your",      "our",       "us",      "its",        "any",
    "may",     "might",  "must",    "own",       "same",      "such",    "much",       "even",
    "well",    "still",  "never",   "always",    "something", "nothing", "everything", "someone",
    "started", "start",  "stop",    "stopped",   "turn",      "turned",  "walk",       "walked",
    "smile",   "smiled", "laugh",   "laughed",   "cried",     "cry",     "scared",     "brave",
    "kind",    "nice",   "pretty",  "beautiful", "strong",    "fast",    "slow",       "hot",
    "cold",    "tired",  "hungry",  "special",   "together",  "family",
};
constexpr std::string_view kCapitalised[] = {
    "The",  "Once",  "One",   "He",  "She",  "It",  "They", "I",     "We",    "You",  "Lily",
    "Tim",  "Ben",   "Mom",   "Dad", "Then", "But", "When", "After", "Every", "This", "There",
    "What", "Hello", "Thank", "Yes", "No",   "In",  "A",    "His",   "Her",   "So",   "As",
};
constexpr std::string_view kSuffixes[] = {
    "s",   "ed", "ing", "er", "ly", "es", "est", "ful", "ness", "tion", "ment", "able",
    "ers", "y",  "ies", "en", "le", "al", "ous", "ive", "ity",  "ic",   "ish",  "less",
};

// Relative letter frequencies of English (per mille), for ordering generated n-grams.
constexpr std::array<double, 26> kLetterFreq = {
    81.7, 14.9, 27.8, 42.5, 127.0, 22.3, 20.2, 60.9, 69.7, 1.5,  7.7, 40.3, 24.1,
    67.5, 75.1, 19.3, 0.95, 59.9,  63.3, 90.6, 27.6, 9.8,  23.6, 1.5, 19.7, 0.74,
};
constexpr double kBoundaryFreq = 150.0;  // how often a word starts, on the same scale

// Number of bytes of the UTF-8 character starting with `lead`.
size_t utf8_char_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  return 4;
}

class PieceList {
 public:
  explicit PieceList(size_t capacity) : capacity_(capacity) {}
  bool full() const { return pieces_.size() >= capacity_; }
  bool has(const std::string& p) const { return seen_.count(p) > 0; }
  // Adds `piece` after the prefixes it is built from, so every piece is reachable by merging
  // (prefix, last character) whatever the cut-off.
  void add_with_prefixes(const std::string& piece) {
    size_t pos = 0;
    while (pos < piece.size() && !full()) {
      pos += utf8_char_len(static_cast<unsigned char>(piece[pos]));
      std::string prefix = piece.substr(0, pos);
      if (utf8_chars(prefix) >= 2 && !has(prefix)) {
        seen_.insert(prefix);
        pieces_.push_back(std::move(prefix));
      }
    }
  }
  std::vector<std::string> take() { return std::move(pieces_); }

  static size_t utf8_chars(const std::string& s) {
    size_t n = 0;
    for (size_t i = 0; i < s.size(); i += utf8_char_len(static_cast<unsigned char>(s[i]))) ++n;
    return n;
  }

 private:
  size_t capacity_;
  std::vector<std::string> pieces_;
  std::unordered_set<std::string> seen_;
};

// Letter n-grams (2 and 3 letters, with or without a leading ▁) ordered by how likely they
// are in English text. An n-gram's weight is smaller than its prefix's, so prefixes sort first.
std::vector<std::string> ngram_candidates() {
  struct Candidate {
    double weight;
    std::string text;
  };
  std::vector<Candidate> cands;
  cands.reserve(2 * (26 * 26 + 26 * 26 * 26));
  const double total = 1000.0 + kBoundaryFreq;
  for (int a = 0; a < 26; ++a) {
    for (int b = 0; b < 26; ++b) {
      double wab = kLetterFreq[a] / total * kLetterFreq[b] / total;
      const std::string ab{static_cast<char>('a' + a), static_cast<char>('a' + b)};
      cands.push_back({wab, ab});
      cands.push_back({wab * kBoundaryFreq / total, std::string(kBoundary) + ab});
      for (int c = 0; c < 26; ++c) {
        double wabc = wab * kLetterFreq[c] / total;
        cands.push_back({wabc, ab + char('a' + c)});
        cands.push_back(
            {wabc * kBoundaryFreq / total, std::string(kBoundary) + ab + char('a' + c)});
      }
    }
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) {
    if (x.weight != y.weight) return x.weight > y.weight;
    return x.text < y.text;
  });
  std::vector<std::string> out;
  out.reserve(cands.size());
  for (auto& c : cands) out.push_back(std::move(c.text));
  return out;
}

}  // namespace

SyntheticVocab synthetic_vocab(int64_t vocab_size) {
  if (vocab_size < kSyntheticVocabMinSize)
    fail(
        "synthetic vocabulary: {} tokens is too small (at least {}: 3 special, 256 byte and 95 "
        "single-character tokens)",
        vocab_size, kSyntheticVocabMinSize);
  if (vocab_size > (int64_t{1} << 24))
    fail("synthetic vocabulary: {} tokens is too large", vocab_size);
  SyntheticVocab v;
  v.tokens.reserve(vocab_size);
  auto push = [&](std::string text, float score, SyntheticTokenType type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(static_cast<int32_t>(type));
  };
  push("<unk>", 0.0f, SyntheticTokenType::unknown);
  push("<s>", 0.0f, SyntheticTokenType::control);
  push("</s>", 0.0f, SyntheticTokenType::control);
  for (int b = 0; b < 256; ++b) push(fmt::format("<0x{:02X}>", b), 0.0f, SyntheticTokenType::byte);

  // Single characters go last (lowest scores), as in Llama's vocabulary; they are reserved
  // up front so a small vocabulary still covers all of ASCII.
  std::vector<std::string> singles{std::string(kBoundary)};
  for (char c = '!'; c <= '~'; ++c) singles.emplace_back(1, c);

  const size_t n_merged = static_cast<size_t>(vocab_size) - v.tokens.size() - singles.size();
  PieceList merged(n_merged);
  const std::string b(kBoundary);
  for (std::string_view w : kWords) merged.add_with_prefixes(b + std::string(w));
  for (std::string_view w : kCapitalised) merged.add_with_prefixes(b + std::string(w));
  for (std::string_view s : kSuffixes) merged.add_with_prefixes(std::string(s));
  for (std::string_view w : kWords) merged.add_with_prefixes(std::string(w));  // inside words
  for (char d = '0'; d <= '9'; ++d) merged.add_with_prefixes(b + d);
  for (const std::string& ngram : ngram_candidates()) {
    if (merged.full()) break;
    merged.add_with_prefixes(ngram);
  }
  // Past the n-grams (vocabularies above ~36k): digit pairs and ▁-prefixed 4-grams of the
  // most frequent letters keep the construction total for any size.
  for (int n = 0; !merged.full(); ++n) {
    if (n < 100) {
      merged.add_with_prefixes(fmt::format("{:02d}", n));
      continue;
    }
    std::string piece = b;
    for (int k = n - 100;; k /= 26) {
      piece += static_cast<char>('a' + k % 26);
      if (k < 26) break;
    }
    piece += "s";
    merged.add_with_prefixes(piece);
  }
  float score = 0.0f;
  for (std::string& piece : merged.take())
    push(std::move(piece), score -= 1.0f, SyntheticTokenType::normal);
  for (std::string& piece : singles)
    push(std::move(piece), score -= 1.0f, SyntheticTokenType::normal);
  REFIT_ASSERT(static_cast<int64_t>(v.tokens.size()) == vocab_size);
  return v;
}

std::vector<std::string> synthetic_vocab_merges(const SyntheticVocab& vocab) {
  std::unordered_map<std::string_view, int32_t> id;
  id.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i)
    if (vocab.types[i] == static_cast<int32_t>(SyntheticTokenType::normal))
      id.emplace(vocab.tokens[i], static_cast<int32_t>(i));
  struct Merge {
    float score;
    int32_t piece, left, right;
    size_t split;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (vocab.types[i] != static_cast<int32_t>(SyntheticTokenType::normal)) continue;
    std::string_view piece = vocab.tokens[i];
    for (size_t pos = utf8_char_len(static_cast<unsigned char>(piece[0])); pos < piece.size();
         pos += utf8_char_len(static_cast<unsigned char>(piece[pos]))) {
      auto l = id.find(piece.substr(0, pos));
      auto r = id.find(piece.substr(pos));
      if (l != id.end() && r != id.end())
        merges.push_back({vocab.scores[i], static_cast<int32_t>(i), l->second, r->second, pos});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& x, const Merge& y) {
    if (x.score != y.score) return x.score > y.score;
    if (x.piece != y.piece) return x.piece < y.piece;
    if (x.left != y.left) return x.left < y.left;
    return x.right < y.right;
  });
  std::vector<std::string> out;
  out.reserve(merges.size());
  for (const Merge& m : merges) {
    const std::string& piece = vocab.tokens[m.piece];
    out.push_back(piece.substr(0, m.split) + " " + piece.substr(m.split));
  }
  return out;
}

void add_gguf_tokenizer_metadata(GgufWriter& w, const SyntheticVocab& vocab) {
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string("tokenizer.ggml.pre", "default");
  w.add_array_strings("tokenizer.ggml.tokens", vocab.tokens);
  w.add_array_f32("tokenizer.ggml.scores", vocab.scores);
  w.add_array_i32("tokenizer.ggml.token_type", vocab.types);
  w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos_id));
  w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos_id));
  w.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(vocab.unk_id));
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
  w.add_bool("tokenizer.ggml.add_space_prefix", true);
}

namespace {
nlohmann::json added_token(int32_t id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}
}  // namespace

nlohmann::json hf_tokenizer_json(const SyntheticVocab& vocab) {
  using nlohmann::json;
  const std::string b(kBoundary);
  json vocab_map = json::object();
  for (size_t i = 0; i < vocab.size(); ++i) vocab_map[vocab.tokens[i]] = static_cast<int64_t>(i);
  const std::string& bos = vocab.tokens[vocab.bos_id];
  json j = json::object();
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = json::array({added_token(vocab.unk_id, vocab.tokens[vocab.unk_id]),
                                   added_token(vocab.bos_id, bos),
                                   added_token(vocab.eos_id, vocab.tokens[vocab.eos_id])});
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       json::array({{{"type", "Prepend"}, {"prepend", b}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", b}}})}};
  j["pre_tokenizer"] = nullptr;
  auto special = [&](const std::string& t) {
    return json{{"SpecialToken", {{"id", t}, {"type_id", 0}}}};
  };
  auto seq = [](const char* id, int type_id) {
    return json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({special(bos), seq("A", 0)})},
      {"pair", json::array({special(bos), seq("A", 0), special(bos), seq("B", 1)})},
      {"special_tokens",
       {{bos,
         {{"id", bos}, {"ids", json::array({vocab.bos_id})}, {"tokens", json::array({bos})}}}}}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       json::array({{{"type", "Replace"}, {"pattern", {{"String", b}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", vocab.tokens[vocab.unk_id]},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"ignore_merges", false},
                {"vocab", std::move(vocab_map)},
                {"merges", synthetic_vocab_merges(vocab)}};
  return j;
}

nlohmann::json hf_tokenizer_config_json(const SyntheticVocab& vocab, int64_t model_max_length) {
  using nlohmann::json;
  json decoder = json::object();
  for (int32_t id : {vocab.unk_id, vocab.bos_id, vocab.eos_id}) {
    json t = added_token(id, vocab.tokens[id]);
    t.erase("id");
    decoder[std::to_string(id)] = std::move(t);
  }
  return {{"add_bos_token", true},
          {"add_eos_token", false},
          {"added_tokens_decoder", std::move(decoder)},
          {"bos_token", vocab.tokens[vocab.bos_id]},
          {"eos_token", vocab.tokens[vocab.eos_id]},
          {"unk_token", vocab.tokens[vocab.unk_id]},
          {"pad_token", nullptr},
          {"clean_up_tokenization_spaces", false},
          {"legacy", false},
          {"model_max_length", model_max_length},
          {"padding_side", "right"},
          {"sp_model_kwargs", json::object()},
          {"spaces_between_special_tokens", false},
          {"tokenizer_class", "LlamaTokenizer"},
          {"use_default_system_prompt", false}};
}

std::unique_ptr<Tokenizer> synthetic_tokenizer(int64_t vocab_size) {
  const SyntheticVocab vocab = synthetic_vocab(vocab_size);
  VocabData data;
  data.source = "built-in demo vocabulary";
  data.model = VocabModel::vocab_model_spm;
  data.tokens = vocab.tokens;
  data.scores = vocab.scores;
  for (int32_t t : vocab.types) data.types.push_back(static_cast<TokenType>(t));
  data.bos = vocab.bos_id;
  data.eos = vocab.eos_id;
  data.unk = vocab.unk_id;
  data.add_bos = true;
  return std::make_unique<Tokenizer>(std::move(data));
}

}  // namespace refit
