// llama.cpp's tokenizer test vectors (../shared/oracle/vocab, FORMATS.md §5): every case of
// every vocabulary, tokenised without BOS/EOS and without parsing special tokens, through
// tokenize_for_cli(), the function `refit tokenize` prints with. A few cases also go
// through the built binary itself.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

const std::string kOracle = std::string(REFIT_SHARED_DIR) + "/oracle";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct VectorCase {
  std::string text;
  std::string expected;  // ids, single spaces, no leading/trailing space
};

std::string strip(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// .inp: texts each followed by "\n__ggml_vocab_test__\n"; .out: one line of ids per text.
std::vector<VectorCase> read_vectors(const std::string& inp_path, const std::string& out_path) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::string inp = read_file(inp_path);
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    texts.push_back(inp.substr(pos, hit - pos));
  std::istringstream out(read_file(out_path));
  std::vector<VectorCase> cases;
  std::string line;
  for (const auto& text : texts) {
    EXPECT_TRUE(static_cast<bool>(std::getline(out, line)))
        << out_path << " has fewer lines than cases";
    cases.push_back({text, strip(line)});
  }
  return cases;
}

void expect_vectors(const Tokenizer& tokenizer, const std::string& inp, const std::string& out) {
  auto cases = read_vectors(inp, out);
  ASSERT_GE(cases.size(), 40u) << inp;
  int failures = 0;
  for (const auto& c : cases) {
    std::string got = tokenize_for_cli(tokenizer, c.text, /*no_bos=*/true, /*parse_special=*/false);
    EXPECT_EQ(got, c.expected) << "text: '" << c.text << "' (" << inp << ")";
    failures += got != c.expected;
  }
  EXPECT_EQ(failures, 0);
}

class VocabVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectors, every_case_matches_llama_cpp) {
  std::string base = kOracle + "/vocab/ggml-vocab-" + GetParam() + ".gguf";
  auto tokenizer = load_tokenizer(base);
  expect_vectors(*tokenizer, base + ".inp", base + ".out");
}

INSTANTIATE_TEST_SUITE_P(Oracle, VocabVectors,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-llm", "falcon",
                                           "starcoder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

const std::string kStories = kOracle + "/stories260K";

TEST(TokenizerStories260K, gguf_vocabulary_passes_its_vectors) {
  auto tokenizer = load_tokenizer(kStories + "/stories260K.gguf");
  expect_vectors(*tokenizer, kStories + "/tokenizer/stories260K.gguf.inp",
                 kStories + "/tokenizer/stories260K.gguf.out");
}

TEST(TokenizerStories260K, llama2c_tok512_with_model_header_passes_the_same_vectors) {
  auto tokenizer = load_tokenizer(kStories + "/stories260K.bin", kStories + "/tok512.bin");
  EXPECT_EQ(tokenizer->size(), 512u);
  expect_vectors(*tokenizer, kStories + "/tokenizer/stories260K.gguf.inp",
                 kStories + "/tokenizer/stories260K.gguf.out");
}

TEST(TokenizerStories260K, llama2c_tok512_alone_passes_the_same_vectors) {
  auto tokenizer = load_tokenizer(kStories + "/tok512.bin");
  EXPECT_EQ(tokenizer->size(), 512u);
  expect_vectors(*tokenizer, kStories + "/tokenizer/stories260K.gguf.inp",
                 kStories + "/tokenizer/stories260K.gguf.out");
}

TEST(TokenizerStories260K, tok512_and_gguf_vocabularies_are_identical) {
  auto from_bin = load_tokenizer(kStories + "/tok512.bin");
  auto from_gguf = load_tokenizer(kStories + "/stories260K.gguf");
  ASSERT_EQ(from_bin->size(), from_gguf->size());
  for (TokenId id = 0; id < static_cast<TokenId>(from_bin->size()); ++id) {
    EXPECT_EQ(from_bin->vocab().text(id), from_gguf->vocab().text(id)) << id;
    EXPECT_EQ(from_bin->vocab().score(id), from_gguf->vocab().score(id)) << id;
    EXPECT_EQ(from_bin->vocab().type(id), from_gguf->vocab().type(id)) << id;
  }
}

// llama2.c's own prompt encoding (llama2c_<prompt>.tokens.txt, BOS included).
TEST(TokenizerStories260K, prompts_encode_like_llama2c_run) {
  auto tokenizer = load_tokenizer(kStories + "/stories260K.bin", kStories + "/tok512.bin");
  for (const char* prompt : {"once_upon_a_time", "the_little_dog", "caf_ber_123"}) {
    std::string tokens = read_file(kStories + "/llama2c/llama2c_" + prompt + ".tokens.txt");
    size_t at = tokens.find("prompt_tokens:");
    ASSERT_NE(at, std::string::npos) << prompt;
    std::string expected = strip(tokens.substr(at + 14, tokens.find('\n', at) - at - 14));
    std::string text = std::string(prompt) == "once_upon_a_time" ? "Once upon a time"
                       : std::string(prompt) == "the_little_dog" ? "The little dog"
                                                                 : "Café ☕ über 123!";
    EXPECT_EQ(tokenize_for_cli(*tokenizer, text, /*no_bos=*/false, /*parse_special=*/false),
              expected)
        << prompt;
  }
}

std::string run_binary(const std::string& args) {
  // Grouped so that stderr of every command in `args` (which may end in "; echo rc=$?") is kept.
  std::string command = "{ " + std::string(REFIT_BINARY) + " " + args + "; } 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  EXPECT_TRUE(pipe) << command;
  std::string out;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe.get()))
    out.append(buffer.data(), n);
  return out;
}

TEST(TokenizeCli, binary_prints_the_same_ids_as_the_vectors) {
  struct {
    std::string model, text, expected;
  } cases[] = {
      {kOracle + "/vocab/ggml-vocab-llama-spm.gguf", "Hello world", "15043 3186"},
      {kOracle + "/vocab/ggml-vocab-llama-spm.gguf", " Hello", "29871 15043"},
      {kOracle + "/vocab/ggml-vocab-gpt-2.gguf", "Hello world", "15496 995"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(run_binary("tokenize --no-bos -m '" + c.model + "' '" + c.text + "'"),
              c.expected + "\n")
        << c.model;
  }
  // BOS is added where the vocabulary asks for it (llama-spm: add_bos_token = true).
  EXPECT_EQ(
      run_binary("tokenize -m '" + kOracle + "/vocab/ggml-vocab-llama-spm.gguf' 'Hello world'"),
      "1 15043 3186\n");
  // llama2.c model + tokenizer, and decoding back.
  EXPECT_EQ(run_binary("tokenize -m '" + kStories + "/stories260K.bin' --tokenizer '" + kStories +
                       "/tok512.bin' 'Once upon a time'"),
            "1 403 407 261 378\n");
  EXPECT_EQ(
      run_binary("tokenize --decode -m '" + kStories + "/stories260K.gguf' '1 403 407 261 378'"),
      "Once upon a time\n");
}

TEST(TokenizeCli, bad_input_gives_an_error_not_a_crash) {
  std::string out = run_binary("tokenize -m /nonexistent/file.gguf hi; echo rc=$?");
  EXPECT_NE(out.find("no such file"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
  out =
      run_binary("tokenize --decode -m '" + kStories + "/stories260K.gguf' '1 99999'; echo rc=$?");
  EXPECT_NE(out.find("outside the vocabulary"), std::string::npos) << out;
  out = run_binary("tokenize -m '" + kStories + "/stories260K.bin' hi; echo rc=$?");
  EXPECT_NE(out.find("--tokenizer"), std::string::npos) << out;
}

}  // namespace
}  // namespace refit
