// The whole model against independent implementations (../shared/oracle):
//  * stories260K: llama2.c's greedy tokens, token for token, and its logits within 1e-4,
//    from the llama2.c .bin, the GGUF conversion and the Hugging Face folder;
//  * llama.cpp's synthetic GGUF models (llama F32/Q8_0/MXFP4, qwen2, qwen3): greedy ids
//    and teacher-forced logits within the tolerances written in llamacpp/README.md.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "formats/checkpoint.h"
#include "models/model_loader.h"
#include "reference_files.h"
#include "runtime/generator.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

const std::string kOracle = std::string(REFIT_SHARED_DIR) + "/oracle";

using testing::ids_of;
using testing::read_floats;
using testing::read_key_values;

struct LogitError {
  double max_abs = 0, mean_abs = 0;
};

LogitError compare_logits(const std::vector<float>& got, const std::vector<float>& want,
                          size_t rows, size_t vocab) {
  LogitError e;
  EXPECT_GE(got.size(), rows * vocab);
  EXPECT_GE(want.size(), rows * vocab);
  for (size_t i = 0; i < rows * vocab; ++i) {
    double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    e.max_abs = std::max(e.max_abs, d);
    e.mean_abs += d;
  }
  e.mean_abs /= static_cast<double>(rows * vocab);
  return e;
}

// Every row of logits for `sequence` fed in one batch (teacher forcing).
std::vector<float> teacher_forced_logits(const Model& model, const std::vector<int32_t>& sequence) {
  KvCache cache = model.make_cache(static_cast<int64_t>(sequence.size()));
  Tensor logits = model.forward(sequence, 0, cache, /*all_logits=*/true);
  return logits.to_floats();
}

class Stories260K : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(Stories260K, GreedyTokensAndLogitsMatchLlama2c) {
  const auto& [source, prompt] = GetParam();
  const std::string dir = kOracle + "/stories260K";
  const std::string path = source == "bin"    ? dir + "/stories260K.bin"
                           : source == "gguf" ? dir + "/stories260K.gguf"
                                              : dir + "/hf";
  auto model = load_model(path);
  auto ref = read_key_values(dir + "/llama2c/llama2c_" + prompt + ".tokens.txt");
  const std::vector<int32_t> prompt_ids = ids_of(ref["prompt_tokens"]);
  const std::vector<int32_t> sequence = ids_of(ref["sequence"]);
  ASSERT_GT(sequence.size(), prompt_ids.size());

  if (source != "hf") {  // the HF folder has no tokenizer: it is fed the reference ids
    auto tokenizer =
        source == "bin" ? load_tokenizer(path, dir + "/tok512.bin") : load_tokenizer(path);
    EXPECT_EQ(tokenizer->encode(prompt == "once_upon_a_time" ? "Once upon a time"
                                : prompt == "the_little_dog" ? "The little dog"
                                                             : "Café ☕ über 123!",
                                true, false),
              prompt_ids);
  }

  GenerateRequest req;
  req.prompt = prompt_ids;
  req.max_tokens = static_cast<int64_t>(sequence.size() - prompt_ids.size());
  req.stop_tokens = {1};  // llama2.c stops when it samples BOS
  req.record_logits = true;
  GenerateResult result = generate(*model, req);
  std::vector<int32_t> expected(sequence.begin() + prompt_ids.size(), sequence.end());
  EXPECT_EQ(result.tokens, expected);

  const std::vector<float> want = read_floats(dir + "/llama2c/llama2c_" + prompt + ".logits.f32");
  const size_t vocab = 512, rows = std::min(want.size() / vocab, result.logits.size() / vocab);
  ASSERT_GE(rows, sequence.size() - 1);
  LogitError e = compare_logits(result.logits, want, rows, vocab);
  EXPECT_LT(e.max_abs, 1e-4) << "mean " << e.mean_abs;
}

INSTANTIATE_TEST_SUITE_P(
    Oracle, Stories260K,
    ::testing::Combine(::testing::Values("bin", "gguf", "hf"),
                       ::testing::Values("once_upon_a_time", "the_little_dog", "caf_ber_123")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

struct LlamaCppCase {
  std::string folder;
  bool exact_tokens;         // F32: every generated id must match
  double max_abs, mean_abs;  // teacher-forced tolerance from llamacpp/README.md
};
// How gtest shows a case (instead of its bytes).
void PrintTo(const LlamaCppCase& c, std::ostream* os) { *os << c.folder; }

class LlamaCppOracle : public ::testing::TestWithParam<LlamaCppCase> {};

TEST_P(LlamaCppOracle, MatchesLlamaCppReference) {
  const LlamaCppCase& c = GetParam();
  const std::string dir = kOracle + "/llamacpp/" + c.folder;
  std::string gguf;
  for (const char* name :
       {"micro-llama-f32-s1.gguf", "micro-llama-q8_0-s1.gguf", "micro-llama-mxfp4-s1.gguf",
        "micro-qwen2-f32-s1.gguf", "micro-qwen3-f32-s1.gguf"})
    if (std::ifstream(dir + "/" + name)) gguf = dir + "/" + name;
  ASSERT_FALSE(gguf.empty()) << dir;
  auto checkpoint = Checkpoint::open(gguf);
  auto model = load_model(*checkpoint);
  auto tokenizer = load_tokenizer(gguf);
  for (const char* prompt : {"once_upon_a_time", "the_quick_brown_fox", "hello_world_123"}) {
    SCOPED_TRACE(prompt);
    auto ref = read_key_values(dir + "/" + prompt + ".tokens.txt");
    const std::vector<int32_t> prompt_ids = ids_of(ref["prompt_ids"]);
    const std::vector<int32_t> generated = ids_of(ref["generated_ids"]);
    std::string text = ref["prompt"];
    text = text.substr(text.find('"') + 1);
    text = text.substr(0, text.rfind('"'));
    EXPECT_EQ(tokenizer->encode(text, true, false), prompt_ids);
    std::vector<int32_t> sequence = prompt_ids;
    sequence.insert(sequence.end(), generated.begin(), generated.end());
    if (c.exact_tokens) {
      GenerateRequest req;
      req.prompt = prompt_ids;
      req.max_tokens = static_cast<int64_t>(generated.size());
      GenerateResult result = generate(*model, req);
      EXPECT_EQ(result.tokens, generated);
    }
    const std::string logits_path = dir + "/" + prompt + ".logits.f32";
    if (!std::ifstream(logits_path)) continue;  // this copy keeps logits for one prompt only
    const std::vector<float> want = read_floats(logits_path);
    const size_t vocab = static_cast<size_t>(model->config().vocab_size);
    ASSERT_EQ(want.size(), sequence.size() * vocab);
    LogitError e =
        compare_logits(teacher_forced_logits(*model, sequence), want, sequence.size(), vocab);
    EXPECT_LT(e.max_abs, c.max_abs);
    EXPECT_LT(e.mean_abs, c.mean_abs);
    RecordProperty(std::string(prompt) + "_max_abs", std::to_string(e.max_abs));
  }
}

INSTANTIATE_TEST_SUITE_P(Oracle, LlamaCppOracle,
                         ::testing::Values(LlamaCppCase{"llama-f32", true, 1e-3, 1e-4},
                                           LlamaCppCase{"qwen2-f32", true, 1e-3, 1e-4},
                                           LlamaCppCase{"qwen3-f32", true, 1e-3, 1e-4},
                                           LlamaCppCase{"llama-q8_0", false, 5, 0.5},
                                           LlamaCppCase{"llama-mxfp4", false, 5, 0.5}),
                         [](const auto& info) {
                           std::string n = info.param.folder;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// Seed 000's biases: Qwen2's q/k/v biases must be applied. Zeroing them changes logits.
TEST(ModelArchitectures, Qwen2BiasesAreApplied) {
  const std::string gguf = kOracle + "/llamacpp/qwen2-f32/micro-qwen2-f32-s1.gguf";
  auto model = load_model(gguf);
  ASSERT_TRUE(model->config().qkv_bias);
  ASSERT_TRUE(model->config().tied_embeddings);
  const std::vector<int32_t> seq = {7454, 2402, 257, 640};
  std::vector<float> with_bias = teacher_forced_logits(*model, seq);
  int zeroed = 0;
  for (const auto& p : model->parameters().all())
    for (const SubShard& s : p->sub_shards())
      if (s.checkpoint_name.ends_with("_proj.bias")) {
        p->load(s, Tensor::zeros(s.checkpoint_shape, DType::f32));
        ++zeroed;
      }
  EXPECT_EQ(zeroed, 3 * model->config().n_layers);
  LogitError e = compare_logits(teacher_forced_logits(*model, seq), with_bias, seq.size(),
                                static_cast<size_t>(model->config().vocab_size));
  EXPECT_GT(e.mean_abs, 1.0) << "zeroed biases barely changed the logits";
}

TEST(ModelArchitectures, TiedAndUntiedOutputEmbeddingsLoad) {
  auto untied = load_model(kOracle + "/llamacpp/llama-f32/micro-llama-f32-s1.gguf");
  EXPECT_FALSE(untied->config().tied_embeddings);
  EXPECT_NE(untied->parameters().find("lm_head.weight"), nullptr);
  auto tied = load_model(kOracle + "/llamacpp/qwen3-f32/micro-qwen3-f32-s1.gguf");
  EXPECT_TRUE(tied->config().tied_embeddings);
  EXPECT_EQ(tied->parameters().find("lm_head.weight"), nullptr);
  EXPECT_TRUE(tied->config().qk_norm);
}

TEST(Generation, ContextLengthIsEnforcedWithAClearError) {
  auto model = load_model(kOracle + "/stories260K/stories260K.bin");
  GenerateRequest req;
  req.prompt = {1, 403};
  req.max_tokens = 600;  // seq_len is 512
  try {
    generate(*model, req);
    FAIL() << "expected a context-length error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context length is 512"), std::string::npos) << e.what();
  }
}

TEST(Generation, SameSeedSameTokensDifferentSeedDifferentTokens) {
  auto model = load_model(kOracle + "/stories260K/stories260K.bin");
  auto run = [&](uint64_t seed) {
    GenerateRequest req;
    req.prompt = {1, 403, 407, 261, 378};
    req.max_tokens = 48;
    req.sampling.temperature = 1.0f;
    req.sampling.top_p = 0.95f;
    req.sampling.top_k = 40;
    req.sampling.seed = seed;
    return generate(*model, req).tokens;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

}  // namespace
}  // namespace refit
