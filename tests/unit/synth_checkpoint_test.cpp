// Synthetic checkpoints on disk: the GGUF file and the HF folder read back with the formats
// readers hold exactly the synthetic tensors (GGUF llama q/k rows permuted, and permuted
// back they equal the HF rows), their configs parse to the preset, sharding works, and the
// files are deterministic.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/gguf.h"
#include "formats/hf_folder.h"
#include "formats_test_util.h"
#include "gtest_printers.h"
#include "models/tensor_table.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"

namespace refit {
namespace {

using testing::TempDir;

bool same_bytes(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return a.dtype() == b.dtype() && a.shape() == b.shape() && ca.nbytes() == cb.nbytes() &&
         std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A small llama-family config (fast to write) with GQA, so q and k permute differently.
ModelConfig small_config(Architecture arch) {
  ModelConfig c = synthetic_preset(arch, "tiny");
  c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.ffn_dim = 96;
  c.vocab_size = 400;
  c.tied_embeddings = arch != Architecture::llama;
  return c;
}

void expect_same_config(const ModelConfig& got, const ModelConfig& want) {
  EXPECT_EQ(got.arch, want.arch);
  EXPECT_EQ(got.dim, want.dim);
  EXPECT_EQ(got.n_layers, want.n_layers);
  EXPECT_EQ(got.n_heads, want.n_heads);
  EXPECT_EQ(got.n_kv_heads, want.n_kv_heads);
  EXPECT_EQ(got.head_dim, want.head_dim);
  EXPECT_EQ(got.ffn_dim, want.ffn_dim);
  EXPECT_EQ(got.max_seq_len, want.max_seq_len);
  EXPECT_FLOAT_EQ(got.rms_eps, want.rms_eps);
  EXPECT_FLOAT_EQ(got.rope_theta, want.rope_theta);
  EXPECT_EQ(got.qkv_bias, want.qkv_bias);
  EXPECT_EQ(got.qk_norm, want.qk_norm);
  EXPECT_EQ(got.bos_id, want.bos_id);
  EXPECT_EQ(got.eos_id, want.eos_id);
}

class SynthCheckpoint : public ::testing::TestWithParam<std::tuple<Architecture, DType>> {};

TEST_P(SynthCheckpoint, gguf_holds_the_synthetic_tensors_with_llama_qk_permuted) {
  auto [arch, dtype] = GetParam();
  const ModelConfig c = small_config(arch);
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  SyntheticCheckpointOptions o;
  o.weight_dtype = dtype;
  o.seed = 42;
  write_synthetic_gguf(path, c, o);

  auto f = GgufFile::open(path);
  const GgufMetadata& m = f->metadata();
  const std::string a = architecture_name(arch);
  EXPECT_EQ(m.require_string("general.architecture"), a);
  EXPECT_EQ(m.require_u32("general.file_type"), gguf_file_type(dtype));
  EXPECT_EQ(m.require_u32(a + ".rope.dimension_count"), 16u);
  EXPECT_EQ(m.require_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(m.require_array_strings("tokenizer.ggml.tokens").size(), 400u);
  EXPECT_EQ(m.require_array_f32("tokenizer.ggml.scores").size(), 400u);
  EXPECT_EQ(m.require_array_i32("tokenizer.ggml.token_type").size(), 400u);
  EXPECT_TRUE(m.require_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(m.require_u32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(m.require_u32("tokenizer.ggml.unknown_token_id"), 0u);
  ModelConfig read = config_from_gguf(m);
  expect_same_config(read, c);
  EXPECT_EQ(read.vocab_size, 400);

  const auto specs = model_tensor_specs(c);
  ASSERT_EQ(f->tensors().size(), specs.size());
  int permuted = 0;
  for (const TensorSpec& s : specs) {
    Tensor want = synthetic_tensor(c, s, dtype, 42);
    Tensor got = f->tensor(s.gguf_name);
    EXPECT_EQ(got.dtype(), synthetic_storage_dtype(s, dtype)) << s.gguf_name;
    if (s.gguf_rope_permute_heads > 0) {
      ++permuted;
      EXPECT_FALSE(same_bytes(got, want)) << s.gguf_name << " was not permuted";
      EXPECT_TRUE(same_bytes(got, permute_rows_for_gguf_rope(want, s.gguf_rope_permute_heads)))
          << s.gguf_name;
      EXPECT_TRUE(
          same_bytes(permute_rows_for_gguf_rope(got, s.gguf_rope_permute_heads, true), want))
          << s.gguf_name;
    } else {
      EXPECT_TRUE(same_bytes(got, want)) << s.gguf_name;
    }
  }
  EXPECT_EQ(permuted, arch == Architecture::llama ? 2 * c.n_layers : 0);
}

TEST_P(SynthCheckpoint, hf_folder_holds_the_synthetic_tensors_and_config) {
  auto [arch, dtype] = GetParam();
  const ModelConfig c = small_config(arch);
  TempDir dir;
  const std::string out = dir.file("hf");
  SyntheticCheckpointOptions o;
  o.weight_dtype = dtype;
  o.seed = 42;
  write_synthetic_hf(out, c, o);

  auto folder = HfFolder::open(out);
  ModelConfig read = config_from_hf_json(folder->config().dump(), "config.json");
  expect_same_config(read, c);
  EXPECT_EQ(read.tied_embeddings, c.tied_embeddings);
  EXPECT_EQ(read.weight_dtype, dtype);
  EXPECT_EQ(folder->generation_config()["eos_token_id"], 2);
  EXPECT_EQ(folder->tokenizer_config()["add_bos_token"], true);
  EXPECT_TRUE(folder->tokenizer_json_path().has_value());
  EXPECT_EQ(folder->shards().size(), 1u);
  EXPECT_EQ(folder->shards()[0]->metadata().at("format"), "pt");

  const auto specs = model_tensor_specs(c);
  EXPECT_EQ(folder->tensor_names().size(), specs.size());
  for (const TensorSpec& s : specs)
    EXPECT_TRUE(same_bytes(folder->tensor(s.hf_name), synthetic_tensor(c, s, dtype, 42)))
        << s.hf_name;
  EXPECT_EQ(folder->has_tensor("lm_head.weight"), !c.tied_embeddings);
}

INSTANTIATE_TEST_SUITE_P(ArchAndDtype, SynthCheckpoint,
                         ::testing::Combine(::testing::Values(Architecture::llama,
                                                              Architecture::qwen2,
                                                              Architecture::qwen3),
                                            ::testing::Values(DType::f32, DType::f16, DType::bf16)),
                         [](const auto& info) {
                           return std::string(architecture_name(std::get<0>(info.param))) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

TEST(SynthCheckpointFiles, qwen2_has_biases_and_qwen3_has_qk_norms_in_both_formats) {
  TempDir dir;
  SyntheticCheckpointOptions o;
  write_synthetic_hf(dir.file("q2"), small_config(Architecture::qwen2), o);
  write_synthetic_gguf(dir.file("q3.gguf"), small_config(Architecture::qwen3), o);
  auto q2 = HfFolder::open(dir.file("q2"));
  EXPECT_TRUE(q2->has_tensor("model.layers.1.self_attn.k_proj.bias"));
  EXPECT_FALSE(q2->has_tensor("model.layers.1.self_attn.q_norm.weight"));
  auto q3 = GgufFile::open(dir.file("q3.gguf"));
  EXPECT_NE(q3->find_tensor("blk.1.attn_q_norm.weight"), nullptr);
  EXPECT_EQ(q3->find_tensor("blk.1.attn_q.bias"), nullptr);
  EXPECT_EQ(q3->find_tensor("output.weight"), nullptr);  // tied
}

TEST(SynthCheckpointFiles, writing_twice_gives_identical_files_and_another_seed_differs) {
  TempDir dir;
  const ModelConfig c = small_config(Architecture::llama);
  SyntheticCheckpointOptions o;
  o.weight_dtype = DType::bf16;
  o.seed = 9;
  write_synthetic_gguf(dir.file("a.gguf"), c, o);
  write_synthetic_gguf(dir.file("b.gguf"), c, o);
  write_synthetic_hf(dir.file("a"), c, o);
  write_synthetic_hf(dir.file("b"), c, o);
  EXPECT_EQ(slurp(dir.file("a.gguf")), slurp(dir.file("b.gguf")));
  for (const char* f :
       {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(slurp(dir.file("a") + "/" + f), slurp(dir.file("b") + "/" + f)) << f;
  o.seed = 10;
  o.name = "synthetic-llama-64d-s9";  // same name: only the weights may differ
  write_synthetic_gguf(dir.file("c.gguf"), c, o);
  EXPECT_NE(slurp(dir.file("a.gguf")), slurp(dir.file("c.gguf")));
  EXPECT_EQ(slurp(dir.file("a.gguf")).size(), slurp(dir.file("c.gguf")).size());
}

TEST(SynthCheckpointFiles, hf_weights_are_sharded_with_an_index_when_large) {
  TempDir dir;
  const ModelConfig c = small_config(Architecture::llama);
  SyntheticCheckpointOptions o;
  o.max_shard_bytes = 120000;  // embeddings alone are 102400 bytes in f32
  const std::string out = dir.file("sharded");
  write_synthetic_hf(out, c, o);
  EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors"));
  ASSERT_TRUE(std::filesystem::exists(out + "/model.safetensors.index.json"));
  auto folder = HfFolder::open(out);
  EXPECT_GT(folder->shards().size(), 2u);
  for (const auto& shard : folder->shards()) {
    uint64_t bytes = 0;
    for (const auto& t : shard->tensors()) bytes += t.nbytes();
    EXPECT_TRUE(bytes <= o.max_shard_bytes || shard->tensors().size() == 1) << shard->path();
  }
  auto index = read_json_file(out + "/model.safetensors.index.json");
  uint64_t total = 0;
  for (const TensorSpec& s : model_tensor_specs(c)) {
    EXPECT_TRUE(same_bytes(folder->tensor(s.hf_name), synthetic_tensor(c, s, DType::f32, 0)))
        << s.hf_name;
    total += synthetic_tensor(c, s, DType::f32, 0).nbytes();
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"],
            "model-00001-of-" + fmt::format("{:05d}", folder->shards().size()) + ".safetensors");

  // Writing the same folder again unsharded removes the stale index.
  o.max_shard_bytes = 1ull << 40;
  write_synthetic_hf(out, c, o);
  EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors.index.json"));
  EXPECT_EQ(HfFolder::open(out)->shards().size(), 1u);
}

TEST(SynthCheckpointFiles, unsupported_weight_dtype_is_refused) {
  TempDir dir;
  SyntheticCheckpointOptions o;
  o.weight_dtype = DType::f8_e4m3fn;
  EXPECT_THROW(write_synthetic_gguf(dir.file("x.gguf"), small_config(Architecture::llama), o),
               Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
}

}  // namespace
}  // namespace refit

namespace refit {
namespace {

TEST(SynthCheckpointFiles, q8_0_gguf_quantizes_2d_weights_and_keeps_norms_f32) {
  TempDir dir;
  const ModelConfig c = small_config(Architecture::llama);
  SyntheticCheckpointOptions o;
  o.gguf_q8_0 = true;
  o.seed = 4;
  write_synthetic_gguf(dir.file("q.gguf"), c, o);
  auto f = GgufFile::open(dir.file("q.gguf"));
  EXPECT_EQ(f->metadata().require_u32("general.file_type"), 7u);
  EXPECT_EQ(f->metadata().require_u32("general.quantization_version"), 2u);
  for (const TensorSpec& s : model_tensor_specs(c)) {
    const GgufTensorInfo& info = f->tensor_info(s.gguf_name);
    const bool is_2d = s.role == TensorRole::matmul || s.role == TensorRole::embedding;
    EXPECT_EQ(info.type, is_2d ? GgmlType::q8_0 : GgmlType::f32) << s.gguf_name;
    if (!is_2d) continue;
    // Dequantized values are within half a quantization step of the (permuted) f32 values.
    Tensor want = synthetic_tensor(c, s, DType::f32, 4);
    if (s.gguf_rope_permute_heads > 0)
      want = permute_rows_for_gguf_rope(want, s.gguf_rope_permute_heads);
    std::vector<float> w = want.to_floats(), got = f->dequantize(s.gguf_name).to_floats();
    ASSERT_EQ(w.size(), got.size());
    for (size_t b = 0; b < w.size(); b += 32) {
      float amax = 0;
      for (size_t j = b; j < b + 32; ++j) amax = std::max(amax, std::abs(w[j]));
      for (size_t j = b; j < b + 32; ++j)
        ASSERT_LE(std::abs(got[j] - w[j]), amax / 127 * 0.51f + 1e-3f * amax)
            << s.gguf_name << " " << j;
    }
  }
  EXPECT_THROW(write_synthetic_hf(dir.file("hf"), c, o), Error);
}

}  // namespace
}  // namespace refit
