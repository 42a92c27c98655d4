// Tiny compressed-tensors FP8 checkpoints for the tests, written the way llm-compressor
// writes them: `<layer>.weight` F8_E4M3 beside `<layer>.weight_scale` ([1] per tensor,
// [N, 1] per channel) and, with static activation scales, `<layer>.input_scale` ([1] or
// []), the other tensors as they are, and its quantization_config.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/float_formats.h"
#include "formats/checkpoint.h"
#include "formats/hf_folder.h"
#include "formats/safetensors_writer.h"
#include "kernels/quant/quant_scheme.h"
#include "models/model_loader.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"

namespace refit::ct_test {

namespace fs = std::filesystem;
using Weights = std::map<std::string, Tensor>;  // canonical name -> f32

// A fresh directory under the temp dir, removed with the object.
struct Dir {
  fs::path path;
  Dir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() /
           ("refit_ct_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(path);
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

// A two-layer llama with an untied lm_head (so `ignore: ["lm_head"]` means something), f32.
inline ModelConfig tiny_config() {
  ModelConfig c = synthetic_preset(Architecture::llama, "tiny");
  c.dim = 64, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.ffn_dim = 160;
  c.n_layers = 2, c.vocab_size = 512, c.max_seq_len = 64, c.tied_embeddings = false;
  return c;
}

// The source model's folder, written once per process.
inline const std::string& source_dir() {
  static Dir dir;
  static const std::string path = [] {
    SyntheticCheckpointOptions o;
    o.seed = 11;
    write_synthetic_hf(dir.str(), tiny_config(), o);
    return dir.str();
  }();
  return path;
}

inline nlohmann::json source_config() {
  return nlohmann::json::parse(std::ifstream(source_dir() + "/config.json"));
}

inline Weights source_weights() {
  auto ck = Checkpoint::open(source_dir());
  Weights out;
  for (const std::string& name : ck->hf()->tensor_names())
    out[name] = ck->hf()->tensor(name).to(DType::f32).clone();
  return out;
}

// Every value times (1 + 0.2 u) + 0.01 u, u in [-0.5, 0.5) from `seed`: a trainer's step.
inline Weights perturbed(const Weights& w, uint32_t seed) {
  Weights out;
  uint64_t state = seed;
  for (const auto& [name, t] : w) {
    std::vector<float> v = t.to_floats();
    for (float& x : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>(state >> 40) * 0x1.0p-24f - 0.5f;
      x = x * (1.0f + 0.2f * u) + 0.01f * u;
    }
    out[name] = Tensor::from_floats(t.shape(), v);
  }
  return out;
}

// The same values rounded to bf16 (what the trainer sends) and widened back.
inline Weights as_bf16(const Weights& w) {
  Weights out;
  for (const auto& [name, t] : w) out[name] = t.to(DType::bf16);
  return out;
}

struct CtOptions {
  std::string strategy = "channel";  // "tensor" or "channel"
  bool dynamic = false;              // input_activations: dynamic per token (else null)
  // Scales as a calibration observer with headroom leaves them (amax / 448 * 1.37, so the
  // largest code is ~320, not 448) rounded to BF16 and stored BF16; else refit's own
  // min-max scales (amax / 448, f32), bit for bit what a refit from floats computes.
  bool headroom_bf16_scales = false;
  std::vector<std::string> ignore = {"lm_head"};
  // Static per-tensor activation scales (input_activations {strategy tensor, dynamic false},
  // as older RedHatAI / neuralmagic *-FP8 checkpoints): `<layer>.input_scale` beside each
  // quantized weight, input_scale(<layer>) its value. Empty: no static scales.
  std::function<float(const std::string& layer)> input_scale;
  bool scalar_input_scale = false;       // stored with shape [] (else [1])
  DType input_scale_dtype = DType::f32;  // as stored
  // Replaces what is written for a layer's input_scale (a misshapen one, say); empty: none.
  std::function<Tensor(const std::string& layer, Tensor scale)> edit_input_scale;
};

inline bool ignored(const std::string& name, const CtOptions& o) {
  for (const std::string& i : o.ignore) {
    if (i == "lm_head" && name == "lm_head.weight") return true;
    if (i == "re:.*down_proj$" && name.find("down_proj.weight") != std::string::npos) return true;
  }
  return false;
}

inline bool is_linear(const std::string& name) {
  return name.ends_with("_proj.weight") || name == "lm_head.weight";
}

inline nlohmann::json ct_quantization_config(const CtOptions& o) {
  nlohmann::json weights = {{"num_bits", 8},
                            {"type", "float"},
                            {"symmetric", true},
                            {"strategy", o.strategy},
                            {"dynamic", false},
                            {"group_size", nullptr},
                            {"block_structure", nullptr},
                            {"actorder", nullptr},
                            {"observer", "minmax"},
                            {"observer_kwargs", nlohmann::json::object()}};
  nlohmann::json acts = nullptr;
  if (o.dynamic)
    acts = {{"num_bits", 8},       {"type", "float"}, {"symmetric", true},
            {"strategy", "token"}, {"dynamic", true}, {"observer", nullptr}};
  if (o.input_scale)
    acts = {{"num_bits", 8},        {"type", "float"},  {"symmetric", true},
            {"strategy", "tensor"}, {"dynamic", false}, {"observer", "minmax"}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"kv_cache_scheme", nullptr},
          {"global_compression_ratio", nullptr},
          {"ignore", o.ignore},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", weights},
              {"input_activations", acts},
              {"output_activations", nullptr},
              {"format", "float-quantized"}}}}}};
}

inline void write_safetensors(const std::string& file,
                              const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, t] : tensors) entries.push_back({name, t.dtype(), t.shape()});
  SafetensorsWriter writer(file, entries);
  for (const auto& [name, t] : tensors) writer.write(name, t);
  writer.finish();
}

// FP8 codes [n, k] and scales ([1] or [n, 1]) of an f32 [n, k] weight.
inline std::pair<Tensor, Tensor> quantize_weight(const Tensor& w, const CtOptions& o) {
  const int64_t n = w.size(0), k = w.size(1);
  const bool tensor = o.strategy == "tensor";
  Tensor codes = Tensor::empty({n, k}, DType::f8_e4m3fn);
  auto* c = static_cast<uint8_t*>(codes.raw_data());
  const float* x = w.data<const float>();
  if (!o.headroom_bf16_scales) {
    QuantScheme s;
    s.method = tensor ? QuantMethod::fp8_tensor : QuantMethod::fp8_channel;
    Tensor rows = Tensor::empty({n, 1}, DType::f32);
    quantize_rows(s, x, n, k, c, rows.raw_data());
    return {codes, tensor ? rows.narrow(0, 0, 1).view({1}).contiguous() : rows};
  }
  Tensor scales = Tensor::empty(tensor ? Shape{1} : Shape{n, 1}, DType::bf16);
  auto* sb = static_cast<uint16_t*>(scales.raw_data());
  for (int64_t r0 = 0; r0 < n; r0 += tensor ? n : 1) {
    const int64_t r1 = tensor ? n : r0 + 1;
    float amax = 0.0f;
    for (int64_t i = r0 * k; i < r1 * k; ++i) amax = std::max(amax, std::fabs(x[i]));
    const uint16_t bits = f32_to_bf16(amax / 448.0f * 1.37f);
    sb[tensor ? 0 : r0] = bits;
    const float scale = bf16_to_f32(bits);
    for (int64_t i = r0 * k; i < r1 * k; ++i) c[i] = f32_to_f8_e4m3fn(x[i] / scale);
  }
  return {codes, scales};
}

// A compressed-tensors checkpoint of `weights` in `dir`; `decoded_dir`, when given, gets
// the same model with every FP8 weight replaced by its f32 value code * scale.
inline void write_ct_checkpoint(const std::string& dir, const Weights& weights, const CtOptions& o,
                                const std::string& decoded_dir = "") {
  nlohmann::json config = source_config();
  config["quantization_config"] = ct_quantization_config(o);
  std::ofstream(dir + "/config.json") << config.dump(2);
  std::vector<std::pair<std::string, Tensor>> tensors, decoded;
  for (const auto& [name, t] : weights) {
    if (!is_linear(name) || ignored(name, o)) {
      tensors.emplace_back(name, t);
      decoded.emplace_back(name, t);
      continue;
    }
    auto [codes, scales] = quantize_weight(t, o);
    tensors.emplace_back(name, codes);
    tensors.emplace_back(name + "_scale", scales);
    if (o.input_scale) {
      const std::string layer = name.substr(0, name.size() - std::string(".weight").size());
      Tensor in = Tensor::from_floats(o.scalar_input_scale ? Shape{} : Shape{1},
                                      std::vector<float>{o.input_scale(layer)})
                      .to(o.input_scale_dtype);
      if (o.edit_input_scale) in = o.edit_input_scale(layer, in);
      tensors.emplace_back(layer + ".input_scale", in);
    }
    const std::vector<float> s = scales.to_floats();
    Tensor d = Tensor::empty(t.shape(), DType::f32);
    const auto* c = static_cast<const uint8_t*>(codes.raw_data());
    for (int64_t i = 0; i < d.numel(); ++i)
      d.data<float>()[i] =
          f8_e4m3fn_to_f32(c[i]) * s[s.size() == 1 ? 0 : static_cast<size_t>(i / t.size(1))];
    decoded.emplace_back(name, d);
  }
  write_safetensors(dir + "/model.safetensors", tensors);
  if (decoded_dir.empty()) return;
  nlohmann::json plain = source_config();
  std::ofstream(decoded_dir + "/config.json") << plain.dump(2);
  write_safetensors(decoded_dir + "/model.safetensors", decoded);
}

}  // namespace refit::ct_test
