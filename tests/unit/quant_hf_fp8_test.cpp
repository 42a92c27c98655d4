// Pre-quantized Hugging Face FP8 checkpoints (F8_E4M3 weights with weight_scale_inv in
// 128 x 128 blocks and quantization_config in config.json, as DeepSeek-V3 / Qwen FP8
// ship them) are served quantized with the checkpoint's scheme and its values.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/hf_folder.h"
#include "formats/safetensors_writer.h"
#include "kernels/quant/quant_scheme.h"
#include "models/model_loader.h"
#include "runtime/engine.h"

namespace refit {
namespace {

namespace fs = std::filesystem;
const std::string kStoriesHf = std::string(REFIT_SHARED_DIR) + "/oracle/stories260K/hf";

bool is_linear(const std::string& name) { return name.find("_proj.weight") != std::string::npos; }

// stories260K's HF folder rewritten as an FP8 block-quantized checkpoint.
std::string write_fp8_checkpoint() {
  const fs::path dir = fs::temp_directory_path() / fmt::format("refit_quant_fp8_{}", ::getpid());
  fs::create_directories(dir);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(kStoriesHf + "/config.json"));
  config["quantization_config"] = {{"quant_method", "fp8"},
                                   {"weight_block_size", {128, 128}},
                                   {"activation_scheme", "dynamic"},
                                   {"fmt", "e4m3"}};
  std::ofstream(dir / "config.json") << config.dump(2);
  auto src = Checkpoint::open(kStoriesHf);
  const HfFolder& hf = *src->hf();
  std::vector<std::pair<std::string, Tensor>> tensors;
  const QuantScheme block = parse_quant_scheme("fp8-block");
  for (const std::string& name : hf.tensor_names()) {
    Tensor t = hf.tensor(name).to(DType::f32).contiguous();
    if (!is_linear(name)) {
      tensors.emplace_back(name, t);
      continue;
    }
    const int64_t n = t.size(0), k = t.size(1), bn = (n + 127) / 128, bk = (k + 127) / 128;
    Tensor codes = Tensor::empty({n, k}, DType::f8_e4m3fn);
    Tensor row_scales = Tensor::empty({n, bk}, DType::f32);
    quantize_rows(block, t.data<float>(), n, k, codes.raw_data(), row_scales.raw_data());
    Tensor scale_inv = Tensor::empty({bn, bk}, DType::f32);
    for (int64_t b = 0; b < bn; ++b)
      for (int64_t j = 0; j < bk; ++j)
        scale_inv.data<float>()[b * bk + j] = row_scales.data<float>()[b * 128 * bk + j];
    tensors.emplace_back(name, codes);
    tensors.emplace_back(name + "_scale_inv", scale_inv);
  }
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, t] : tensors) entries.push_back({name, t.dtype(), t.shape()});
  SafetensorsWriter writer((dir / "model.safetensors").string(), entries);
  for (const auto& [name, t] : tensors) writer.write(name, t);
  writer.finish();
  return dir.string();
}

TEST(QuantHfFp8, block_fp8_checkpoint_is_served_quantized_with_its_values) {
  const std::string dir = write_fp8_checkpoint();
  EngineOptions options;
  options.model_path = dir;
  Engine engine(options);
  EXPECT_NE(engine.description().find("fp8-block-w8a8"), std::string::npos) << engine.description();
  auto ck = Checkpoint::open(dir);
  CheckpointWeights file(*ck, engine.config());
  int checked = 0;
  for (const auto& p : engine.model().parameters().all()) {
    if (!p->quantized()) continue;
    EXPECT_EQ(p->quantization().name(), "fp8-block-w8a8");
    const int64_t n = p->local_shape()[0], k = p->local_shape()[1];
    std::vector<float> got(static_cast<size_t>(n * k));
    dequantize_rows(p->quantization(), p->data().raw_data(), p->scale().raw_data(), n, k,
                    got.data());
    std::vector<float> want;
    for (const SubShard& s : p->sub_shards()) {
      auto v = file.find(s.checkpoint_name).to_floats();  // code * scale_inv
      want.insert(want.end(), v.begin(), v.end());
    }
    ASSERT_EQ(got.size(), want.size());
    // Re-quantizing code * s gives the codes back; the scale may move by one f32 ulp.
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i])) << p->name() << " " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 20);  // 5 layers x (qkv, o, gate_up, down)
  // Reloading the same pre-quantized checkpoint (an RL sync from disk) is exact: every
  // byte of codes and scales is re-derived identically, in the same storage.
  std::vector<std::vector<uint8_t>> before;
  auto snapshot = [&] {
    std::vector<std::vector<uint8_t>> out;
    for (const auto& p : engine.model().parameters().all())
      for (const Tensor* t : {&p->data(), &p->scale()}) {
        if (!t->defined()) continue;
        const auto* b = static_cast<const uint8_t*>(t->raw_data());
        out.emplace_back(b, b + t->nbytes());
      }
    return out;
  };
  before = snapshot();
  const void* qkv = engine.model()
                        .parameters()
                        .get("model.layers.0.self_attn.qkv_proj.weight")
                        .scale()
                        .raw_data();
  engine.update_weights_from_disk(dir);
  EXPECT_EQ(snapshot(), before);
  EXPECT_EQ(engine.model()
                .parameters()
                .get("model.layers.0.self_attn.qkv_proj.weight")
                .scale()
                .raw_data(),
            qkv);
  fs::remove_all(dir);
}

// quant_method "fp8" with static activation scales: its input_scale tensors would go unused
// by the dynamic or f32 paths, so the load is refused by name rather than served W8A16.
TEST(QuantHfFp8, static_activation_scheme_is_refused_by_name) {
  const std::string dir = write_fp8_checkpoint();
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["quantization_config"]["activation_scheme"] = "static";
  std::ofstream(dir + "/config.json") << config.dump(2);
  EngineOptions options;
  options.model_path = dir;
  try {
    Engine engine(options);
    FAIL() << "a static activation_scheme was served";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activation_scheme \"static\""), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace refit
