// Synthetic gpt-oss checkpoints (`refit synth --arch gpt-oss`): the HF folder stacks the
// experts as transformers does (fused interleaved gate_up_proj, or MXFP4 _blocks/_scales), the
// GGUF as llama.cpp does (block_mxfp4 with --mxfp4-experts); same seed, same parameters,
// bitwise, in every pair of forms. The MXFP4 quantizer is ggml's own: re-quantizing the
// oracle's F32 experts gives the bytes llama-quantize wrote into its MXFP4 file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "formats/gguf_quantize.h"
#include "formats/hf_folder.h"
#include "formats_test_util.h"
#include "models/model_loader.h"
#include "models/quantize_model.h"
#include "refit_test_support.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"

namespace refit {
namespace {

using testing::kOracle;
using testing::TempDir;

ModelConfig micro_gpt_oss() {
  ModelConfig c = synthetic_preset(Architecture::gpt_oss, "tiny", 3);
  c.vocab_size = 512;  // small files: the test is about the experts
  return c;
}

std::unique_ptr<Model> load_as_engine(const std::string& path) {
  auto ck = Checkpoint::open(path);
  ModelConfig config = read_model_config(*ck);
  auto model = create_model(config, config.weight_dtype);
  quantize_for_checkpoint(*model, *ck, QuantScheme{});
  load_weights(*model, *ck);
  return model;
}

TEST(SynthGptOss, PresetHasGptOssShapesAndTwentyBHasTheRealOnes) {
  const ModelConfig tiny = micro_gpt_oss();
  EXPECT_EQ(tiny.n_layers, 3);
  EXPECT_EQ(tiny.expert_ffn_dim, tiny.dim);
  EXPECT_TRUE(tiny.attention_sinks && tiny.router_bias && tiny.expert_bias);
  EXPECT_EQ(tiny.layer(0).window, 128);
  EXPECT_EQ(tiny.layer(1).window, 0);
  const ModelConfig b20 = synthetic_preset(Architecture::gpt_oss, "20b", 4);
  EXPECT_EQ(b20.dim, 2880);
  EXPECT_EQ(b20.n_layers, 4);
  EXPECT_EQ(b20.n_heads, 64);
  EXPECT_EQ(b20.n_kv_heads, 8);
  EXPECT_EQ(b20.head_dim, 64);
  EXPECT_EQ(b20.n_experts, 32);
  EXPECT_EQ(b20.n_experts_used, 4);
  EXPECT_EQ(b20.expert_ffn_dim, 2880);
  EXPECT_EQ(b20.vocab_size, 201088);
  EXPECT_THROW(synthetic_preset(Architecture::llama, "20b"), Error);
}

TEST(SynthGptOss, HfFolderStacksExpertsAndLoadsAsTheGguf) {
  TempDir dir;
  const ModelConfig c = micro_gpt_oss();
  SyntheticCheckpointOptions o;
  o.seed = 5;
  write_synthetic_hf(dir.file("hf"), c, o);
  write_synthetic_gguf(dir.file("m.gguf"), c, o);
  auto hf = HfFolder::open(dir.file("hf"));
  EXPECT_TRUE(hf->has_tensor("model.layers.1.mlp.experts.gate_up_proj"));
  EXPECT_EQ(hf->tensor_info("model.layers.1.mlp.experts.gate_up_proj").shape,
            (Shape{c.n_experts, c.dim, 2 * c.expert_ffn_dim}));
  EXPECT_EQ(hf->tensor_info("model.layers.1.mlp.experts.down_proj").shape,
            (Shape{c.n_experts, c.expert_ffn_dim, c.dim}));
  EXPECT_FALSE(hf->has_tensor("model.layers.1.mlp.experts.0.gate_proj.weight"));
  EXPECT_EQ(hf->config()["architectures"][0], "GptOssForCausalLM");
  testing::expect_same_bytes(*load_model(dir.file("hf")), *load_model(dir.file("m.gguf")),
                             "synthetic HF vs GGUF");
}

TEST(SynthGptOss, Mxfp4ExpertsAreTheSameInBothFormats) {
  TempDir dir;
  const ModelConfig c = micro_gpt_oss();
  SyntheticCheckpointOptions o;
  o.seed = 9;
  o.mxfp4_experts = true;
  write_synthetic_hf(dir.file("hf"), c, o);
  write_synthetic_gguf(dir.file("m.gguf"), c, o);
  auto g = GgufFile::open(dir.file("m.gguf"));
  EXPECT_EQ(g->tensor_info("blk.0.ffn_down_exps.weight").type, GgmlType::mxfp4);
  EXPECT_EQ(g->tensor_info("blk.0.attn_q.weight").type, GgmlType::f32);
  EXPECT_EQ(*g->metadata().get_u32("general.file_type"), 38u);
  auto hf = HfFolder::open(dir.file("hf"));
  EXPECT_EQ(hf->tensor_info("model.layers.0.mlp.experts.gate_up_proj_blocks").shape,
            (Shape{c.n_experts, 2 * c.expert_ffn_dim, c.dim / 32, 16}));
  EXPECT_EQ(hf->config()["quantization_config"]["quant_method"], "mxfp4");
  auto from_hf = load_as_engine(dir.file("hf"));
  auto from_gguf = load_as_engine(dir.file("m.gguf"));
  EXPECT_EQ(from_hf->parameters().get("model.layers.0.mlp.experts.w2_weight").quantization().method,
            QuantMethod::mxfp4);
  testing::expect_same_bytes(*from_hf, *from_gguf, "synthetic MXFP4 HF vs GGUF");
}

// llama-quantize MXFP4_MOE made the oracle's MXFP4 file from its F32 one (its README): the
// same quantizer over the same values gives the same bytes.
TEST(SynthGptOss, Mxfp4QuantizerIsByteForByteLlamaQuantize) {
  auto f32 = GgufFile::open(kOracle + "/llamacpp/gpt-oss-f32/micro-gpt-oss-f32-s1.gguf");
  auto mx = GgufFile::open(kOracle + "/llamacpp/gpt-oss-mxfp4/micro-gpt-oss-mxfp4-s1.gguf");
  int checked = 0;
  for (const char* proj : {"gate", "up", "down"})
    for (int l = 0; l < 4; ++l) {
      const std::string name = fmt::format("blk.{}.ffn_{}_exps.weight", l, proj);
      const Tensor values = f32->tensor(name).contiguous();
      std::vector<BlockMxfp4> blocks(static_cast<size_t>(values.numel() / 32));
      quantize_row_mxfp4(values.data<const float>(), blocks.data(), values.numel());
      const GgmlTensorView want = mx->raw(name);
      ASSERT_EQ(want.bytes.numel(), static_cast<int64_t>(blocks.size() * sizeof(BlockMxfp4)));
      EXPECT_EQ(std::memcmp(want.bytes.data<const uint8_t>(), blocks.data(), want.bytes.numel()), 0)
          << name;
      ++checked;
    }
  EXPECT_EQ(checked, 12);
}

}  // namespace
}  // namespace refit
