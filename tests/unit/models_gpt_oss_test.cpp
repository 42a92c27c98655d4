// gpt-oss against llama.cpp (../shared/oracle/llamacpp, "MoE models" in its README): the
// base model, its sliding-window (window 8) and YaRN variants in F32, and the MXFP4-expert
// file; then refit of its experts, expert biases, router bias and sinks (law L2).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "formats/checkpoint.h"
#include "formats_test_util.h"
#include "models/config_fields.h"
#include "models/model_loader.h"
#include "oracle_runs.h"
#include "reference_files.h"
#include "refit_test_support.h"
#include "runtime/generator.h"
#include "weights/weight_update.h"

namespace refit {
namespace {

using testing::kPackPrompts;
using testing::pack_gguf;
using testing::pack_run;

using testing::read_floats;
using testing::RefRun;
using testing::teacher_forced;

TEST(GptOss, ConfigFromGgufHasSinksBiasesExpertsAndLlamaCppsWindowPattern) {
  auto ck = Checkpoint::open(pack_gguf("gpt-oss-swa-f32"));
  const ModelConfig c = read_model_config(*ck);
  EXPECT_EQ(c.arch, Architecture::gpt_oss);
  EXPECT_TRUE(c.attention_sinks && c.qkv_bias && c.o_bias && c.router_bias && c.expert_bias);
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.n_experts_used, 4);
  EXPECT_EQ(c.expert_ffn_dim, 96);
  EXPECT_EQ(c.head_dim, 64);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(c.layer(l).window, l % 2 == 0 ? 8 : 0) << "layer " << l;
    EXPECT_EQ(c.layer(l).ffn, FfnKind::moe) << "layer " << l;
  }
  // What `refit inspect` says: the experts' activation with the mixture, no dense hidden_act.
  bool mixture = false;
  for (const std::string& line : describe_config(c)) {
    EXPECT_EQ(line.find("hidden_act"), std::string::npos) << line;
    mixture = mixture || line.find("swiglu_oai") != std::string::npos;
  }
  EXPECT_TRUE(mixture);
}

class GptOssF32 : public ::testing::TestWithParam<const char*> {};

TEST_P(GptOssF32, GreedyIdsAndLogitsMatchLlamaCpp) {
  const std::string folder = GetParam();
  auto model = load_model(pack_gguf(folder));
  for (const char* prompt : kPackPrompts) {
    SCOPED_TRACE(prompt);
    const RefRun r = pack_run(folder, prompt);
    GenerateRequest req;
    req.prompt = r.prompt;
    req.max_tokens = static_cast<int64_t>(r.generated.size());
    EXPECT_EQ(generate(*model, req).tokens, r.generated);
    const std::vector<float> got = teacher_forced(*model, r.sequence);
    const std::vector<float> want =
        read_floats(testing::kLlamaCppPack + "/" + folder + "/" + prompt + ".logits.f32");
    ASSERT_EQ(got.size(), want.size());
    double max_abs = 0, mean_abs = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::fabs(double(got[i]) - want[i]);
      max_abs = std::max(max_abs, e);
      mean_abs += e;
    }
    mean_abs /= double(got.size());
    EXPECT_LT(max_abs, 1e-3);  // the README's F32 MoE tolerances
    EXPECT_LT(mean_abs, 1e-4);
    RecordProperty(std::string(prompt) + "_max_abs", std::to_string(max_abs));
  }
}

INSTANTIATE_TEST_SUITE_P(Oracle, GptOssF32,
                         ::testing::Values("gpt-oss-f32", "gpt-oss-swa-f32", "gpt-oss-yarn-f32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// The MXFP4 file has token files only. Its experts are read by value (exact E2M1 times
// E8M0) with f32 activations, where llama.cpp rounds activations to Q8_0 blocks: teacher-
// forced on llama.cpp's own run, refit's argmax agrees at most steps (ids may differ at
// small margins, the README says).
TEST(GptOss, Mxfp4ExpertsAgreeWithLlamaCppsGreedyChoices) {
  auto model = load_model(pack_gguf("gpt-oss-mxfp4"));
  int agree = 0, steps = 0;
  for (const char* prompt : kPackPrompts) {
    const RefRun r = pack_run("gpt-oss-mxfp4", prompt);
    const std::vector<float> logits = teacher_forced(*model, r.sequence);
    const int64_t vocab = model->config().vocab_size;
    for (size_t k = 0; k < r.generated.size(); ++k) {
      const float* row = logits.data() + (r.prompt.size() - 1 + k) * vocab;
      const int32_t best = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      agree += best == r.generated[k];
      ++steps;
    }
  }
  std::printf("gpt-oss-mxfp4: refit's argmax agrees with llama.cpp's ids at %d/%d steps\n", agree,
              steps);
  EXPECT_GE(agree * 4, steps * 3);
}

// Experts (weights and biases), the router's bias and the sinks, in subsets: a refit is
// bitwise a fresh load from the same values, at the same addresses.
TEST(GptOss, RefitOfExpertsBiasesAndSinksIsBitwiseAFreshLoad) {
  const std::string path = pack_gguf("gpt-oss-f32");
  auto model = load_model(path);
  const auto before = testing::addresses(*model);
  testing::TensorMap current = testing::base_weights(path, *model);
  const testing::TensorMap changed = testing::perturbed(current, 23, DType::f32);
  auto expert = [](int64_t l, int64_t e, const char* p, const char* kind) {
    return fmt::format("model.layers.{}.mlp.experts.{}.{}.{}", l, e, p, kind);
  };
  const std::vector<std::vector<std::string>> updates = {
      {expert(1, 6, "down_proj", "bias")},
      {expert(0, 2, "gate_proj", "weight"), expert(0, 2, "gate_proj", "bias"),
       expert(0, 2, "up_proj", "weight"), expert(0, 2, "up_proj", "bias"),
       expert(0, 2, "down_proj", "weight"), expert(0, 2, "down_proj", "bias")},
      {"model.layers.3.mlp.router.bias", "model.layers.2.self_attn.sinks",
       "model.layers.1.self_attn.o_proj.bias", expert(3, 7, "up_proj", "weight")},
  };
  for (const auto& names : updates) {
    SCOPED_TRACE(names.front());
    WeightUpdate update(model->parameters(), {});
    for (const std::string& n : names) {
      ASSERT_TRUE(changed.count(n)) << n << " is not a parameter";
      update.update(n, changed.at(n));
      current[n] = changed.at(n);
    }
    update.apply();
    auto fresh = testing::fresh_model(model->config(), {}, current, "", "");
    testing::expect_same_bytes(*model, *fresh, "refit vs fresh");
    EXPECT_EQ(testing::addresses(*model), before);
  }
}

}  // namespace
}  // namespace refit
