// `refit synth` end to end: the CLI writes the tiny preset in both formats, and `refit
// generate` gives the same greedy tokens and (within float rounding of the two rope styles)
// the same logits from the GGUF file and from the HF folder — the check that the llama q/k
// row permutation and the per-format metadata agree.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats_test_util.h"

namespace refit {
namespace {

using testing::TempDir;

std::pair<int, std::string> run_cli(const std::string& args) {
  std::string out;
  FILE* p = ::popen((std::string(REFIT_BINARY) + " " + args + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int rc = ::pclose(p);
  return {WEXITSTATUS(rc), out};
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v(std::filesystem::file_size(path) / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

nlohmann::json last_json_line(const std::string& out) {
  size_t start = out.rfind("\n{");
  return nlohmann::json::parse(start == std::string::npos ? out : out.substr(start + 1));
}

class SynthCli : public ::testing::TestWithParam<const char*> {};

TEST_P(SynthCli, gguf_and_hf_give_the_same_tokens_and_logits) {
  const std::string arch = GetParam();
  TempDir dir;
  const std::string gguf = dir.file("m.gguf"), hf = dir.file("hf");
  for (const auto& [format, out] : {std::pair{"gguf", gguf}, std::pair{"hf", hf}}) {
    auto [rc, text] =
        run_cli("synth --arch " + arch + " --preset tiny --dtype f32 --seed 3 --format " + format +
                " -o '" + out + "'");
    ASSERT_EQ(rc, 0) << text;
    EXPECT_NE(text.find(arch + " tiny ("), std::string::npos) << text;
  }
  nlohmann::json results[2];
  std::vector<float> logits[2];
  int i = 0;
  for (const std::string& model : {gguf, hf}) {
    const std::string lf = dir.file("logits" + std::to_string(i));
    auto [rc, text] =
        run_cli("generate -m '" + model +
                "' -p 'Once upon a time, there was a dog.' -n 8 -t 2 --json --logits '" + lf + "'");
    ASSERT_EQ(rc, 0) << text;
    results[i] = last_json_line(text);
    logits[i] = read_floats(lf);
    ++i;
  }
  EXPECT_EQ(results[0]["prompt_tokens"], results[1]["prompt_tokens"]);
  EXPECT_EQ(results[0]["tokens"], results[1]["tokens"]);
  EXPECT_EQ(results[0]["prompt_tokens"][0], 1);  // BOS from add_bos_token in both formats
  ASSERT_EQ(logits[0].size(), logits[1].size());
  ASSERT_GT(logits[0].size(), 32000u * 10);
  double max_diff = 0, sum_sq = 0;
  for (size_t k = 0; k < logits[0].size(); ++k) {
    max_diff = std::max(max_diff, double(std::abs(logits[0][k] - logits[1][k])));
    sum_sq += double(logits[0][k]) * logits[0][k];
  }
  EXPECT_LT(max_diff, 1e-3);
  // Not degenerate: the logits spread over several units, as the oracle's do.
  const double rms = std::sqrt(sum_sq / logits[0].size());
  EXPECT_GT(rms, 2.0);
  EXPECT_LT(rms, 30.0);
}

INSTANTIATE_TEST_SUITE_P(Arch, SynthCli,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma3", "phi3"));

TEST(SynthCliArgs, bad_arguments_fail_with_a_message) {
  TempDir dir;
  auto [rc1, out1] = run_cli("synth --arch gpt2 -o '" + dir.file("x") + "'");
  EXPECT_NE(rc1, 0);
  EXPECT_NE(out1.find("gpt2"), std::string::npos) << out1;
  auto [rc2, out2] = run_cli("synth --preset huge -o '" + dir.file("x") + "'");
  EXPECT_NE(rc2, 0);
  auto [rc3, out3] = run_cli("synth --preset tiny");
  EXPECT_NE(rc3, 0);  // -o is required
  auto [rc4, out4] = run_cli("synth --preset tiny --format gguf -o /nonexistent-dir/x.gguf");
  EXPECT_NE(rc4, 0);
  EXPECT_NE(out4.find("/nonexistent-dir/x.gguf"), std::string::npos) << out4;
}

}  // namespace
}  // namespace refit
