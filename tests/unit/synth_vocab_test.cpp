// The synthetic SentencePiece-style vocabulary and its two descriptions (GGUF tokenizer.ggml.*
// and HF tokenizer.json): layout, coverage of ASCII, reachability of every piece, merges that
// follow the scores, and — the point of it — that score-ordered SPM merging and rank-ordered
// BPE merging with these merges tokenise every text the same way, here, in refit's tokenizer
// from both files, and back to the same text.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/hf_folder.h"
#include "formats_test_util.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"
#include "synthetic/synthetic_vocab.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

using testing::TempDir;
const std::string kMark = "\xE2\x96\x81";  // ▁

const SyntheticVocab& vocab32k() {
  static const SyntheticVocab v = synthetic_vocab(32000);
  return v;
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string normalize(const std::string& text) {  // Prepend ▁, replace ' ' by ▁
  std::string out = kMark;
  for (char c : text) out += c == ' ' ? kMark : std::string(1, c);
  return out;
}

std::vector<int32_t> fallback(const SyntheticVocab& v, const std::string& piece,
                              const std::unordered_map<std::string, int32_t>& id) {
  auto it = id.find(piece);
  if (it != id.end()) return {it->second};
  std::vector<int32_t> bytes;
  for (unsigned char b : piece) bytes.push_back(v.first_byte_id + b);
  return bytes;
}

// llama.cpp's llm_tokenizer_spm: merge the adjacent pair whose union is the best-scored
// token (leftmost on ties) until none is left.
std::vector<int32_t> spm_encode(const SyntheticVocab& v, const std::string& text,
                                const std::unordered_map<std::string, int32_t>& id) {
  std::vector<std::string> sym = utf8_chars(normalize(text));
  while (true) {
    int best = -1;
    float best_score = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = id.find(sym[i] + sym[i + 1]);
      if (it == id.end()) continue;
      if (best < 0 || v.scores[it->second] > best_score)
        best = static_cast<int>(i), best_score = v.scores[it->second];
    }
    if (best < 0) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + best + 1);
  }
  std::vector<int32_t> out;
  for (const auto& s : sym)
    for (int32_t t : fallback(v, s, id)) out.push_back(t);
  return out;
}

// Hugging Face BPE: apply the lowest-ranked merge among adjacent pairs (leftmost on ties).
std::vector<int32_t> bpe_encode(const SyntheticVocab& v, const std::string& text,
                                const std::unordered_map<std::string, int32_t>& id,
                                const std::unordered_map<std::string, size_t>& rank) {
  std::vector<std::string> sym = utf8_chars(normalize(text));
  while (true) {
    int best = -1;
    size_t best_rank = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = rank.find(sym[i] + " " + sym[i + 1]);
      if (it == rank.end()) continue;
      if (best < 0 || it->second < best_rank) best = static_cast<int>(i), best_rank = it->second;
    }
    if (best < 0) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + best + 1);
  }
  std::vector<int32_t> out;
  for (const auto& s : sym)
    for (int32_t t : fallback(v, s, id)) out.push_back(t);
  return out;
}

const std::vector<std::string>& sample_texts() {
  static const std::vector<std::string> texts = {
      "Once upon a time there was a little girl named Lily.",
      "The quick brown fox jumps over the lazy dog!",
      "Hello world 123, 4567 and 89.",
      "   leading spaces and  double  spaces ",
      "She said: \"I can't find my toys!\" {x: [1, 2]} <tag> a+b=c ~`|\\^_",
      "caf\xC3\xA9 na\xC3\xAFve \xE2\x98\x95 \xF0\x9F\x98\x80 tab\there",  // byte fallback
      "antidisestablishmentarianism supercalifragilistic",
      "zzzz qqq xyzzy AAAA BBB",
      "a",
      "",
  };
  return texts;
}

TEST(SynthVocab, layout_specials_bytes_and_all_printable_ascii) {
  const SyntheticVocab& v = vocab32k();
  ASSERT_EQ(v.size(), 32000u);
  EXPECT_EQ(v.tokens[0], "<unk>");
  EXPECT_EQ(v.tokens[1], "<s>");
  EXPECT_EQ(v.tokens[2], "</s>");
  EXPECT_EQ(v.types[0], static_cast<int32_t>(SyntheticTokenType::unknown));
  EXPECT_EQ(v.types[1], static_cast<int32_t>(SyntheticTokenType::control));
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(v.tokens[3 + b], fmt::format("<0x{:02X}>", b));
    EXPECT_EQ(v.types[3 + b], static_cast<int32_t>(SyntheticTokenType::byte));
  }
  std::unordered_set<std::string> all(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(all.size(), v.size()) << "tokens are not unique";
  EXPECT_TRUE(all.count(kMark));
  for (char c = '!'; c <= '~'; ++c) EXPECT_TRUE(all.count(std::string(1, c))) << c;
  for (const char* w : {"\xE2\x96\x81the", "\xE2\x96\x81Once", "\xE2\x96\x81upon", "ing"})
    EXPECT_TRUE(all.count(w)) << w;
  // Normal pieces have strictly decreasing scores.
  for (size_t i = 260; i < v.size(); ++i) ASSERT_LT(v.scores[i], v.scores[i - 1]) << i;
  EXPECT_EQ(synthetic_vocab(32000).tokens, v.tokens);  // deterministic
}

TEST(SynthVocab, every_merged_piece_is_reachable_by_merges_at_any_size) {
  for (int64_t size :
       {kSyntheticVocabMinSize, int64_t{400}, int64_t{5000}, int64_t{32000}, int64_t{40000}}) {
    SyntheticVocab v = synthetic_vocab(size);
    ASSERT_EQ(static_cast<int64_t>(v.size()), size);
    std::unordered_set<std::string> all(v.tokens.begin(), v.tokens.end());
    ASSERT_EQ(all.size(), v.size()) << size;
    for (size_t i = 259; i < v.size(); ++i) {
      auto chars = utf8_chars(v.tokens[i]);
      if (chars.size() < 2) continue;
      bool split = false;
      std::string left;
      for (size_t k = 0; k + 1 < chars.size() && !split; ++k) {
        left += chars[k];
        split = all.count(left) && all.count(v.tokens[i].substr(left.size()));
      }
      EXPECT_TRUE(split) << "unreachable piece " << v.tokens[i] << " at size " << size;
    }
  }
  EXPECT_THROW(synthetic_vocab(kSyntheticVocabMinSize - 1), Error);
}

TEST(SynthVocab, merges_join_into_pieces_and_follow_piece_scores) {
  const SyntheticVocab& v = vocab32k();
  std::unordered_map<std::string, int32_t> id;
  for (size_t i = 0; i < v.size(); ++i) id[v.tokens[i]] = static_cast<int32_t>(i);
  auto merges = synthetic_vocab_merges(v);
  EXPECT_GT(merges.size(), v.size() - 400);
  float last = 1e30f;
  for (const std::string& m : merges) {
    size_t sp = m.find(' ');
    ASSERT_NE(sp, std::string::npos);
    ASSERT_EQ(m.find(' ', sp + 1), std::string::npos) << m;
    auto l = m.substr(0, sp), r = m.substr(sp + 1);
    ASSERT_TRUE(id.count(l) && id.count(r)) << m;
    auto joined = id.find(l + r);
    ASSERT_NE(joined, id.end()) << m;
    ASSERT_LE(v.scores[joined->second], last) << m;
    last = v.scores[joined->second];
  }
}

TEST(SynthVocab, spm_scores_and_bpe_merges_tokenise_alike) {
  const SyntheticVocab& v = vocab32k();
  std::unordered_map<std::string, int32_t> id;
  for (size_t i = 0; i < v.size(); ++i)
    if (v.types[i] == static_cast<int32_t>(SyntheticTokenType::normal))
      id[v.tokens[i]] = static_cast<int32_t>(i);
  std::unordered_map<std::string, size_t> rank;
  auto merges = synthetic_vocab_merges(v);
  for (size_t i = 0; i < merges.size(); ++i) rank.emplace(merges[i], i);
  for (const std::string& text : sample_texts()) {
    auto spm = spm_encode(v, text, id);
    EXPECT_EQ(spm, bpe_encode(v, text, id, rank)) << text;
    if (text.find_first_of("\xC3\xE2\xF0\t") == std::string::npos) {
      for (int32_t t : spm) EXPECT_EQ(v.types[t], 1) << "byte fallback in pure ASCII: " << text;
    }
  }
  // Real words become single pieces.
  EXPECT_EQ(spm_encode(v, "Once upon a time", id).size(), 4u);
}

TEST(SynthVocab, gguf_and_hf_files_give_the_same_tokens_in_refit_tokenizer) {
  TempDir dir;
  ModelConfig c = synthetic_preset(Architecture::llama, "tiny");
  c.n_layers = 1;  // the vocabulary is what matters here
  SyntheticCheckpointOptions o;
  write_synthetic_gguf(dir.file("m.gguf"), c, o);
  write_synthetic_hf(dir.file("hf"), c, o);
  auto gguf_tok = load_tokenizer(dir.file("m.gguf"));
  auto hf_tok = load_tokenizer(dir.file("hf"));
  const SyntheticVocab& v = vocab32k();
  std::unordered_map<std::string, int32_t> id;
  for (size_t i = 0; i < v.size(); ++i)
    if (v.types[i] == static_cast<int32_t>(SyntheticTokenType::normal))
      id[v.tokens[i]] = static_cast<int32_t>(i);
  for (const std::string& text : sample_texts()) {
    if (text.empty()) continue;
    std::vector<TokenId> g = gguf_tok->encode(text, true, false);
    std::vector<TokenId> h = hf_tok->encode(text, true, false);
    EXPECT_EQ(g, h) << text;
    ASSERT_FALSE(g.empty());
    EXPECT_EQ(g[0], 1) << "BOS first";
    std::vector<int32_t> want = spm_encode(v, text, id);
    want.insert(want.begin(), 1);
    EXPECT_EQ(std::vector<int32_t>(g.begin(), g.end()), want) << text;
    EXPECT_EQ(gguf_tok->decode(g), text) << text;
    EXPECT_EQ(hf_tok->decode(h), text) << text;
  }
}

TEST(SynthVocab, hf_tokenizer_files_have_the_llama2_fields) {
  TempDir dir;
  ModelConfig c = synthetic_preset(Architecture::qwen2, "tiny");
  c.n_layers = 1;
  write_synthetic_hf(dir.file("hf"), c, {});
  auto tok = read_json_file(dir.file("hf") + "/tokenizer.json");
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_EQ(tok["model"]["byte_fallback"], true);
  EXPECT_EQ(tok["model"]["unk_token"], "<unk>");
  EXPECT_EQ(tok["model"]["vocab"].size(), 32000u);
  EXPECT_EQ(tok["model"]["vocab"]["<0x41>"], 3 + 0x41);
  EXPECT_EQ(tok["model"]["vocab"][kMark + "the"].get<int>() > 258, true);
  EXPECT_GT(tok["model"]["merges"].size(), 30000u);
  EXPECT_EQ(tok["normalizer"]["type"], "Sequence");
  EXPECT_EQ(tok["normalizer"]["normalizers"][0]["type"], "Prepend");
  EXPECT_EQ(tok["normalizer"]["normalizers"][0]["prepend"], kMark);
  EXPECT_EQ(tok["normalizer"]["normalizers"][1]["type"], "Replace");
  EXPECT_EQ(tok["normalizer"]["normalizers"][1]["pattern"]["String"], " ");
  EXPECT_EQ(tok["normalizer"]["normalizers"][1]["content"], kMark);
  EXPECT_TRUE(tok["pre_tokenizer"].is_null());
  std::vector<std::string> decoders;
  for (const auto& d : tok["decoder"]["decoders"]) decoders.push_back(d["type"]);
  EXPECT_EQ(decoders, (std::vector<std::string>{"Replace", "ByteFallback", "Fuse", "Strip"}));
  ASSERT_EQ(tok["added_tokens"].size(), 3u);
  EXPECT_EQ(tok["added_tokens"][1]["content"], "<s>");
  EXPECT_EQ(tok["added_tokens"][1]["special"], true);

  auto cfg = read_json_file(dir.file("hf") + "/tokenizer_config.json");
  EXPECT_EQ(cfg["bos_token"], "<s>");
  EXPECT_EQ(cfg["eos_token"], "</s>");
  EXPECT_EQ(cfg["add_bos_token"], true);
  EXPECT_EQ(cfg["add_eos_token"], false);
  EXPECT_EQ(cfg["model_max_length"], 2048);

  auto config = read_json_file(dir.file("hf") + "/config.json");
  EXPECT_EQ(config["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(config["model_type"], "qwen2");
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["tie_word_embeddings"], true);
  EXPECT_EQ(config["rms_norm_eps"], 1e-6);
  EXPECT_EQ(config["rope_theta"], 1e6);
  EXPECT_EQ(config["bos_token_id"], 1);
  EXPECT_EQ(config["eos_token_id"], 2);
  auto gen = read_json_file(dir.file("hf") + "/generation_config.json");
  EXPECT_EQ(gen["bos_token_id"], 1);
}

TEST(SynthVocab, vocabulary_only_gguf_can_be_built_in_memory) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  add_gguf_tokenizer_metadata(w, synthetic_vocab(1000));
  std::vector<uint8_t> bytes = w.header_bytes();
  auto f = GgufFile::parse(ByteSource::from_bytes("vocab.gguf", bytes.data(), bytes.size()));
  Tokenizer tok(vocab_from_gguf(f->metadata()));
  EXPECT_EQ(tok.size(), 1000u);
  auto ids = tok.encode("the cat", true, false);
  EXPECT_EQ(tok.decode(ids), "the cat");
}

}  // namespace
}  // namespace refit
