// Weight updates validated as a trainer's bugs need: non-finite values refused by default
// (from tensors and from disk) with the engine bitwise untouched; a checkpoint of another
// architecture or with another hyper-parameter refused naming the field; tensors no
// parameter takes refused by default or listed as ignored; the report of what was written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/safetensors_writer.h"
#include "formats_test_util.h"
#include "models/checkpoint_identity.h"
#include "runtime/engine.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"
#include "weights/finite_scan.h"

namespace refit {
namespace {

using testing::TempDir;

ModelConfig small_llama() {
  ModelConfig c;
  c.arch = Architecture::llama;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 128;
  c.vocab_size = 384;
  c.max_seq_len = 128;
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  return c;
}

// An HF folder of `config` with seed `seed`; `edit` may change, add or drop tensors
// before model.safetensors is written.
std::string write_folder(
    const TempDir& dir, const std::string& name, const ModelConfig& config, uint64_t seed,
    const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit = {}) {
  const std::string path = dir.file(name);
  SyntheticCheckpointOptions o;
  o.seed = seed;
  write_synthetic_hf(path, config, o);
  if (edit) {
    std::vector<std::pair<std::string, Tensor>> tensors =
        synthetic_weights(config, DType::f32, seed);
    edit(tensors);
    write_safetensors(path + "/model.safetensors", tensors);
  }
  return path;
}

Tensor filled(Shape shape, float value) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  std::fill(t.data<float>(), t.data<float>() + t.numel(), value);
  return t;
}

std::map<std::string, std::vector<uint8_t>> stored_bytes(const Engine& engine) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const ParameterInfo& p : engine.named_parameters()) {
    const Tensor t = p.tensor.contiguous();
    const auto* b = static_cast<const uint8_t*>(t.raw_data());
    out[p.name].assign(b, b + t.nbytes());
  }
  return out;
}

std::string refusal(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MENTIONS(message, needle)               \
  EXPECT_NE((message).find(needle), std::string::npos) \
      << "no '" << (needle) << "' in: " << (message)

class RefitValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    base_path_ = write_folder(dir_, "base", small_llama(), 1);
    EngineOptions o;
    o.model_path = base_path_;
    engine_ = std::make_unique<Engine>(o);
    version_ = engine_->weight_version();
    before_ = stored_bytes(*engine_);
  }
  void expect_untouched(const std::string& what) {
    EXPECT_EQ(engine_->weight_version(), version_) << what;
    EXPECT_TRUE(stored_bytes(*engine_) == before_) << what << ": a stored byte changed";
  }
  TempDir dir_;
  std::string base_path_;
  std::unique_ptr<Engine> engine_;
  uint64_t version_ = 0;
  std::map<std::string, std::vector<uint8_t>> before_;
};

constexpr const char* kQ = "model.layers.1.self_attn.q_proj.weight";
constexpr const char* kK = "model.layers.1.self_attn.k_proj.weight";
constexpr const char* kNorm = "model.layers.0.input_layernorm.weight";

TEST_F(RefitValidation, nan_in_a_tensor_update_is_refused_by_default_and_nothing_changes) {
  Tensor good = filled({64, 64}, 0.01f);
  Tensor nan = good.clone();
  nan.set({5, 7}, std::numeric_limits<float>::quiet_NaN());
  const std::string m = refusal([&] {
    engine_->update_weights_from_tensors({{kNorm, filled({64}, 1.0f)}, {kQ, nan}});
  });
  EXPECT_MENTIONS(m, kQ);
  EXPECT_MENTIONS(m, "element [5, 7] is nan");
  expect_untouched("NaN refused");
  // bf16 (what trainers send) is scanned by its bits too.
  Tensor inf16 = good.to(DType::bf16);
  inf16.set({63, 0}, -std::numeric_limits<float>::infinity());
  EXPECT_MENTIONS(refusal([&] {
                    engine_->update_weights_from_tensors({{kQ, inf16}});
                  }),
                  "element [63, 0] is -inf");
  expect_untouched("bf16 -inf refused");
  // The option off takes the values as they are.
  UpdateOptions unchecked;
  unchecked.check_finite = false;
  EXPECT_EQ(engine_->update_weights_from_tensors({{kQ, nan}}, unchecked), version_ + 1);
  EXPECT_FALSE(engine_->last_update_report().checked_finite);
}

TEST_F(RefitValidation, inf_in_a_disk_update_is_refused_by_default_and_taken_with_the_option_off) {
  const std::string bad = write_folder(dir_, "inf", small_llama(), 2, [](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == kK) t.set({3, 9}, std::numeric_limits<float>::infinity());
  });
  const std::string m = refusal([&] { engine_->update_weights_from_disk(bad); });
  EXPECT_MENTIONS(m, kK);
  EXPECT_MENTIONS(m, "element [3, 9] is inf");
  expect_untouched("+inf from disk refused");
  UpdateOptions unchecked;
  unchecked.check_finite = false;
  EXPECT_EQ(engine_->update_weights_from_disk(bad, {}, unchecked), version_ + 1);
}

// A GGUF tensor that is converted on its way in (llama's permuted q/k rows, Q8_0 blocks) is
// checked from the file's bytes, without being made twice.
TEST_F(RefitValidation, non_finite_gguf_tensors_are_refused_from_the_files_bytes) {
  auto poke = [](const std::string& path, const std::string& tensor, uint64_t at, const void* bytes,
                 size_t n) {
    auto file = GgufFile::open(path);
    const uint64_t offset = file->data_offset() + file->tensor_info(tensor).offset + at;
    file.reset();
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
  };
  SyntheticCheckpointOptions o;
  o.seed = 9;
  const std::string plain = dir_.file("nan.gguf");
  write_synthetic_gguf(plain, small_llama(), o);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  poke(plain, "blk.1.attn_q.weight", 4 * 70, &nan, 4);  // row 1, column 6 in GGUF order
  std::string m = refusal([&] { engine_->update_weights_from_disk(plain); });
  EXPECT_MENTIONS(m, kQ);
  EXPECT_MENTIONS(m, "element [1, 6] of GGUF tensor 'blk.1.attn_q.weight' is nan");
  expect_untouched("NaN in a permuted GGUF tensor");

  o.gguf_q8_0 = true;
  const std::string q8 = dir_.file("inf-q8_0.gguf");
  write_synthetic_gguf(q8, small_llama(), o);
  const uint16_t inf_f16 = 0x7C00;
  poke(q8, "blk.0.ffn_up.weight", 2 * 34, &inf_f16, 2);  // block 2's scale d
  m = refusal([&] { engine_->update_weights_from_disk(q8); });
  EXPECT_MENTIONS(m, "model.layers.0.mlp.up_proj.weight");
  EXPECT_MENTIONS(m, "block 2 (values 64..95) has scale inf");
  expect_untouched("inf scale in a Q8_0 block");
  UpdateOptions unchecked;
  unchecked.check_finite = false;
  EXPECT_EQ(engine_->update_weights_from_disk(q8, {}, unchecked), version_ + 1);
}

TEST_F(RefitValidation, a_qwen3_folder_into_a_llama_engine_is_refused_naming_the_architectures) {
  ModelConfig qwen3 = small_llama();
  qwen3.arch = Architecture::qwen3;
  qwen3.qk_norm = true;
  const std::string path = write_folder(dir_, "qwen3", qwen3, 3);
  for (const auto& update :
       std::vector<std::function<void()>>{[&] { engine_->update_weights_from_disk(path); },
                                          [&] { engine_->checkpoint_contents(path); }}) {
    const std::string m = refusal(update);
    EXPECT_MENTIONS(m, "architecture");
    EXPECT_MENTIONS(m, "checkpoint qwen3, served llama");
    EXPECT_MENTIONS(m, "q/k norm");
  }
  expect_untouched("qwen3 refused");
}

TEST_F(RefitValidation, a_checkpoint_with_another_rope_theta_is_refused_naming_both_values) {
  ModelConfig other = small_llama();
  other.rope_theta = 500000.0f;
  other.rms_eps = 1e-6f;
  const std::string path = write_folder(dir_, "theta", other, 4);
  const std::string m = refusal([&] { engine_->update_weights_from_disk(path); });
  EXPECT_MENTIONS(m, "rope_theta: checkpoint 500000, served 10000");
  EXPECT_MENTIONS(m, "rms_norm_eps: checkpoint 1e-06, served 1e-05");
  expect_untouched("rope theta refused");
}

TEST_F(RefitValidation, tensors_no_parameter_takes_are_refused_or_listed_as_ignored) {
  const std::string extra = "model.layers.0.mlp.extra_proj.weight";
  const std::string path = write_folder(dir_, "extra", small_llama(), 5, [&](auto& tensors) {
    tensors.emplace_back(extra, filled({4, 4}, 1.0f));
    // Derived by refit from the config: consumed, not unknown.
    tensors.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", filled({8}, 1.0f));
  });
  const std::string m = refusal([&] { engine_->update_weights_from_disk(path); });
  EXPECT_MENTIONS(m, "1 tensor that no parameter of the served model takes: '" + extra + "'");
  EXPECT_MENTIONS(m, "ignore_unknown_tensors");
  EXPECT_EQ(m.find("inv_freq"), std::string::npos) << m;
  expect_untouched("extra tensor refused");
  EXPECT_EQ(engine_->checkpoint_contents(path).unknown, std::vector<std::string>{extra});

  UpdateOptions ignore;
  ignore.ignore_unknown_tensors = true;
  EXPECT_EQ(engine_->update_weights_from_disk(path, {}, ignore), version_ + 1);
  EXPECT_EQ(engine_->last_update_report().ignored, std::vector<std::string>{extra});
  // From tensors the same: an unknown name is refused, or set aside with the option.
  const std::string t = refusal([&] {
    engine_->update_weights_from_tensors({{kNorm, filled({64}, 1.0f)}, {extra, filled({1}, 1.0f)}});
  });
  EXPECT_MENTIONS(t, "unknown tensor '" + extra + "'");
  EXPECT_EQ(engine_->weight_version(), version_ + 1);
  engine_->update_weights_from_tensors({{kNorm, filled({64}, 1.0f)}, {extra, filled({1}, 1.0f)}},
                                       ignore);
  const UpdateReport r = engine_->last_update_report();
  EXPECT_EQ(r.tensors, std::vector<std::string>{kNorm});
  EXPECT_EQ(r.ignored, std::vector<std::string>{extra});
}

TEST_F(RefitValidation, the_report_counts_tensors_bytes_and_parameters_written) {
  auto update = engine_->begin_update();
  update->update(kQ, Tensor::zeros({64, 64}, DType::bf16));
  update->update(kK, Tensor::zeros({32, 64}, DType::f32));  // q and k share the fused qkv parameter
  update->update(kNorm, filled({64}, 1.0f));
  update->update(kNorm, filled({64}, 1.0f));  // the later one wins: written once
  engine_->commit(*update);
  const UpdateReport r = update->report();
  EXPECT_EQ(r.tensors, (std::vector<std::string>{kQ, kK, kNorm}));
  EXPECT_EQ(r.bytes, size_t{64 * 64 * 2 + 32 * 64 * 4 + 64 * 4});
  EXPECT_EQ(r.parameters, 2u);
  EXPECT_TRUE(r.checked_finite);
  EXPECT_TRUE(r.ignored.empty());
  EXPECT_EQ(engine_->last_update_report().tensors, r.tensors);
  // A whole checkpoint from disk: every tensor, every parameter.
  engine_->update_weights_from_disk(base_path_);
  const UpdateReport disk = engine_->last_update_report();
  EXPECT_EQ(disk.tensors.size(), engine_->model().parameters().checkpoint_names().size());
  EXPECT_EQ(disk.parameters, engine_->model().parameters().all().size());
  EXPECT_GT(disk.bytes, 0u);
}

// The same model in two formats is the same model: compared by refit's reading of each
// (architecture ids and hyper-parameters), not by the strings each format writes.
TEST(RefitIdentity, a_gguf_engine_takes_the_hf_folder_of_its_model_and_vice_versa) {
  TempDir dir;
  for (Architecture arch : {Architecture::llama, Architecture::qwen3}) {
    ModelConfig c = small_llama();
    c.arch = arch;
    c.qk_norm = arch == Architecture::qwen3;
    c.rope_theta = 1e6f;
    const std::string name = architecture_name(arch);
    const std::string hf = write_folder(dir, name + "-hf", c, 7);
    const std::string gguf = dir.file(name + ".gguf");
    SyntheticCheckpointOptions o;
    o.seed = 8;
    write_synthetic_gguf(gguf, c, o);
    for (const auto& [served, update] : {std::pair{gguf, hf}, std::pair{hf, gguf}}) {
      EngineOptions e;
      e.model_path = served;
      Engine engine(e);
      const uint64_t v = engine.weight_version();
      EXPECT_EQ(engine.update_weights_from_disk(update), v + 1) << served << " <- " << update;
      EXPECT_TRUE(engine.checkpoint_contents(update).unknown.empty()) << update;
    }
  }
}

// stories260K's folder ties lm_head to the embeddings (tie_word_embeddings true), its GGUF
// stores a separate output.weight: an update from the folder would leave the GGUF engine's
// head as it was, which a fresh load of the folder would not.
TEST(RefitIdentity, a_tied_checkpoint_into_an_untied_engine_is_refused) {
  const std::string stories = testing::kOracle + "/stories260K";
  EngineOptions o;
  o.model_path = stories + "/stories260K.gguf";
  Engine engine(o);
  EXPECT_MENTIONS(refusal([&] { engine.update_weights_from_disk(stories + "/hf"); }),
                  "tie_word_embeddings: checkpoint true, served false");
  o.model_path = stories + "/stories260K.bin";  // llama2.c: a shared classifier
  Engine llama2c(o);
  const uint64_t w = llama2c.weight_version();
  EXPECT_EQ(llama2c.update_weights_from_disk(stories + "/hf"), w + 1);
}

TEST(RefitIdentity, config_differences_compare_rotary_frequencies_not_how_they_are_written) {
  ModelConfig hf = small_llama();
  hf.rope_scaling.kind = RopeScalingKind::linear;
  hf.rope_scaling.factor = 2.0f;
  ModelConfig gguf = small_llama();  // the same frequencies as GGUF-style freq factors
  gguf.rope_freq_factors.assign(8, 2.0f);
  EXPECT_TRUE(config_differences(hf, gguf).empty());
  gguf.rope_freq_factors[7] = 4.0f;
  const std::vector<ConfigDifference> d = config_differences(hf, gguf);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].field, "rope_scaling (rotary frequencies)");
  ModelConfig windowed = small_llama();
  windowed.sliding_window = 32;
  const std::vector<ConfigDifference> w = config_differences(windowed, small_llama());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].field, "sliding_window");
  EXPECT_EQ(w[0].checkpoint, "32");
}

TEST(FiniteScan, finds_the_first_non_finite_value_by_its_bits_in_every_float_dtype) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::f8_e5m2}) {
    Tensor t = Tensor::zeros({3, 1000}, dt);
    EXPECT_FALSE(find_non_finite(t)) << dtype_name(dt);
    t.set({2, 999}, -std::numeric_limits<double>::infinity());
    t.set({1, 500}, std::numeric_limits<double>::quiet_NaN());
    const auto bad = find_non_finite(t);
    ASSERT_TRUE(bad) << dtype_name(dt);
    EXPECT_EQ(bad->index, (Shape{1, 500})) << dtype_name(dt);
    EXPECT_TRUE(std::isnan(bad->value)) << dtype_name(dt);
  }
  Tensor e4m3 = Tensor::zeros({64}, DType::f8_e4m3fn);
  static_cast<uint8_t*>(e4m3.raw_data())[40] = 0xFF;  // -NaN
  ASSERT_TRUE(find_non_finite(e4m3));
  EXPECT_EQ(find_non_finite(e4m3)->index, Shape{40});
  EXPECT_FALSE(find_non_finite(Tensor::zeros({8}, DType::i32)));
}

TEST(FiniteScan, scans_views_in_their_own_coordinates_and_large_tensors_across_threads) {
  Tensor big = Tensor::zeros({4096, 1024}, DType::bf16);  // 8 MiB: split over the pool
  big.set({4000, 3}, std::numeric_limits<double>::infinity());
  big.set({3000, 1000}, std::numeric_limits<double>::infinity());
  ASSERT_TRUE(find_non_finite(big));
  EXPECT_EQ(find_non_finite(big)->index, (Shape{3000, 1000}));
  EXPECT_EQ(find_non_finite(big)->value, std::numeric_limits<double>::infinity());
  // A column slice (a TP shard of a row-parallel weight) and a transpose.
  const Tensor cols = big.narrow(1, 512, 512);
  EXPECT_EQ(find_non_finite(cols)->index, (Shape{3000, 488}));
  EXPECT_FALSE(find_non_finite(big.narrow(1, 0, 3)));
  EXPECT_EQ(find_non_finite(big.transpose(0, 1))->index, (Shape{3, 4000}));
}

}  // namespace
}  // namespace refit
