// compressed-tensors FP8 checkpoints (llm-compressor's format, most FP8 models on the Hub):
// the codes and scales are stored exactly as the file holds them (per tensor and per
// channel, f32 and bf16 scales), layers the config ignores stay float, dynamic per-token
// activations give FP8 W8A8, the logits are those of the dequantized weights, and every
// other quantization config is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "compressed_tensors_test_util.h"
#include "models/compressed_tensors.h"
#include "models/quantize_model.h"
#include "runtime/engine.h"

namespace refit {
namespace {

using namespace refit::ct_test;

const std::vector<int32_t> kTokens = {1, 17, 200, 45, 3, 99, 128, 7};

std::vector<float> logits(const std::string& path, const std::string& quant = "",
                          const std::string& layout = "") {
  EngineOptions options;
  options.model_path = path;
  options.quant = quant;
  options.layout = layout;
  Engine engine(options);
  return engine.logits(kTokens).to_floats();
}

struct StoreCase {
  std::string strategy;
  bool headroom_bf16_scales;
};
void PrintTo(const StoreCase& c, std::ostream* os) {
  *os << c.strategy << (c.headroom_bf16_scales ? ", bf16 scales with headroom" : ", f32 scales");
}

class CtStore : public ::testing::TestWithParam<StoreCase> {};

// Every code byte and every scale of every quantized parameter is the file's (re-quantizing
// code * scale would move codes when the largest code is not 448, and scales by an ulp).
TEST_P(CtStore, codes_and_scales_are_the_files_and_logits_those_of_the_dequantized_weights) {
  const StoreCase c = GetParam();
  Dir ct, decoded;
  CtOptions o;
  o.strategy = c.strategy;
  o.headroom_bf16_scales = c.headroom_bf16_scales;
  write_ct_checkpoint(ct.str(), source_weights(), o, decoded.str());
  EngineOptions options;
  options.model_path = ct.str();
  Engine engine(options);
  const std::string scheme = "fp8-" + c.strategy;
  EXPECT_NE(engine.description().find(scheme + ": 8 linear weights quantized"), std::string::npos)
      << engine.description();
  auto ck = Checkpoint::open(ct.str());
  const HfFolder& hf = *ck->hf();
  int checked = 0, below_448 = 0;
  for (const auto& p : engine.model().parameters().all()) {
    if (p->name() == "lm_head.weight") {
      EXPECT_FALSE(p->quantized()) << "lm_head is ignored";
    }
    if (!p->quantized()) continue;
    EXPECT_EQ(p->quantization().name(), scheme);
    const int64_t k = p->local_shape()[1];
    for (const SubShard& s : p->sub_shards()) {
      const Tensor codes = hf.tensor(s.checkpoint_name);
      const std::vector<float> scale = hf.tensor(s.checkpoint_name + "_scale").to_floats();
      const auto* want = static_cast<const uint8_t*>(codes.raw_data());
      const auto* got = static_cast<const uint8_t*>(p->data().raw_data()) + s.local_row_offset * k;
      ASSERT_EQ(std::memcmp(got, want, static_cast<size_t>(s.local_rows * k)), 0)
          << s.checkpoint_name;
      float amax = 0.0f;
      for (int64_t i = 0; i < codes.numel(); ++i)
        amax = std::max(amax, std::fabs(f8_e4m3fn_to_f32(want[i])));
      below_448 += amax < 448.0f;
      for (int64_t r = 0; r < s.local_rows; ++r) {
        const float want_scale = scale[scale.size() == 1 ? 0 : static_cast<size_t>(r)];
        ASSERT_EQ(p->scale().data<const float>()[s.local_row_offset + r], want_scale)
            << s.checkpoint_name << " row " << r;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 14);  // 2 layers x (q, k, v, o, gate, up, down)
  // The headroom case is the one a re-quantizing loader gets wrong: no code reaches 448.
  if (c.headroom_bf16_scales) {
    EXPECT_EQ(below_448, checked);
  }
  // W8A16 computes with code * scale in f32: the logits of the dequantized weights served
  // unquantized, up to the order of f32 sums (measured ~1e-7 of the largest logit).
  const std::vector<float> got = engine.logits(kTokens).to_floats(), want = logits(decoded.str());
  ASSERT_EQ(got.size(), want.size());
  float scale = 0.0f, worst = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  EXPECT_LE(worst, 1e-5f * scale) << "largest logit " << scale;
}

INSTANTIATE_TEST_SUITE_P(Strategies, CtStore,
                         ::testing::Values(StoreCase{"tensor", false}, StoreCase{"channel", false},
                                           StoreCase{"tensor", true}, StoreCase{"channel", true}));

// input_activations {dynamic: true, strategy: token}: vLLM's CompressedTensorsW8A8Fp8 with
// dynamic per-token scales; refit's fp8-channel-w8a8, bit for bit the online scheme on the
// same codes, and not the W8A16 logits.
TEST(CtActivations, dynamic_per_token_activations_are_fp8_w8a8) {
  Dir w8a8, w8a16;
  CtOptions o;
  o.dynamic = true;
  write_ct_checkpoint(w8a8.str(), source_weights(), o);
  o.dynamic = false;
  write_ct_checkpoint(w8a16.str(), source_weights(), o);
  EngineOptions options;
  options.model_path = w8a8.str();
  Engine engine(options);
  EXPECT_NE(engine.description().find("fp8-channel-w8a8"), std::string::npos)
      << engine.description();
  const std::vector<float> got = engine.logits(kTokens).to_floats();
  EXPECT_EQ(got, logits(source_dir(), "fp8-channel-w8a8"));
  EXPECT_NE(got, logits(w8a16.str()));
}

// Layers the config ignores (lm_head, a regex) are stored float and stay float; the head is
// quantized where the file quantizes it; the codes load into the shuffled kernel layout too.
TEST(CtIgnore, ignored_layers_stay_float_and_a_quantized_head_is_served_quantized) {
  Dir ignore_down, head;
  CtOptions o;
  o.ignore = {"lm_head", "re:.*down_proj$"};
  write_ct_checkpoint(ignore_down.str(), source_weights(), o);
  {
    EngineOptions options;
    options.model_path = ignore_down.str();
    Engine engine(options);
    for (const auto& p : engine.model().parameters().all()) {
      if (p->name().find("down_proj") != std::string::npos || p->name() == "lm_head.weight") {
        EXPECT_FALSE(p->quantized()) << p->name();
      } else if (p->name().find("_proj") != std::string::npos) {
        EXPECT_TRUE(p->quantized()) << p->name();
      }
    }
  }
  o.ignore = {};
  write_ct_checkpoint(head.str(), source_weights(), o);
  EngineOptions options;
  options.model_path = head.str();
  Engine engine(options);
  EXPECT_TRUE(engine.model().parameters().get("lm_head.weight").quantized());
  // Shuffled codes give the plain layout's logits, also after a reload from disk writes the
  // file's codes again (load_codes re-applies the recorded shuffle).
  options.layout = "shuffle16x16";
  Engine shuffled(options);
  const std::vector<float> plain = engine.logits(kTokens).to_floats();
  EXPECT_EQ(shuffled.logits(kTokens).to_floats(), plain);
  shuffled.update_weights_from_disk(head.str());
  EXPECT_EQ(shuffled.logits(kTokens).to_floats(), plain);
}

// The config and the tensors must agree: a layer the config quantizes stored in float is a
// broken checkpoint, refused naming the tensor.
TEST(CtIgnore, config_and_tensors_that_disagree_are_refused) {
  Dir dir;
  CtOptions o;
  write_ct_checkpoint(dir.str(), source_weights(), o);  // lm_head stored float...
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir.str() + "/config.json"));
  config["quantization_config"]["ignore"] = nlohmann::json::array();  // ...but not ignored
  std::ofstream(dir.str() + "/config.json") << config.dump();
  EngineOptions options;
  options.model_path = dir.str();
  try {
    Engine engine(options);
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'lm_head.weight' is stored f32"), std::string::npos)
        << e.what();
  }
}

// ---- refusals: each names config.json, the method or field, and what refit reads ----

struct Refusal {
  std::string what;
  nlohmann::json quantization_config;
  std::string expected;  // in the message
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.what; }

nlohmann::json ct_with(const std::function<void(nlohmann::json&)>& change) {
  CtOptions o;
  nlohmann::json qc = ct_quantization_config(o);
  change(qc);
  return qc;
}

nlohmann::json& group0(nlohmann::json& qc) { return qc["config_groups"]["group_0"]; }

std::vector<Refusal> refusals() {
  using json = nlohmann::json;
  const json int_args = {{"num_bits", 8},
                         {"type", "int"},
                         {"symmetric", true},
                         {"strategy", "channel"},
                         {"dynamic", false}};
  return {
      {"awq",
       {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemm"}},
       "quant_method 'awq' (AWQ"},
      {"gptq",
       {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"desc_act", false}},
       "quant_method 'gptq' (GPTQ"},
      {"bitsandbytes",
       {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}, {"bnb_4bit_quant_type", "nf4"}},
       "load_in_4bit (bitsandbytes)"},
      {"load_in_8bit", {{"load_in_8bit", true}}, "load_in_8bit (bitsandbytes)"},
      {"modelopt",
       {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}},
       "quant_method 'modelopt'"},
      {"hqq", {{"quant_method", "hqq"}}, "quant_method 'hqq'"},
      {"eetq", {{"quant_method", "eetq"}}, "quant_method 'eetq'"},
      {"unknown", {{"quant_method", "fancy4"}}, "quant_method 'fancy4' is not supported"},
      {"ct int W8A8", ct_with([&](json& qc) {
         group0(qc)["weights"] = int_args;
         group0(qc)["input_activations"] = {{"num_bits", 8},
                                            {"type", "int"},
                                            {"symmetric", true},
                                            {"strategy", "token"},
                                            {"dynamic", true}};
         qc["format"] = group0(qc)["format"] = "int-quantized";
       }),
       "int-quantized"},
      {"ct int weights", ct_with([&](json& qc) { group0(qc)["weights"] = int_args; }),
       ".weights.type 'int'"},
      {"ct W4A16 pack-quantized", ct_with([](json& qc) {
         group0(qc)["weights"] = {{"num_bits", 4},
                                  {"type", "int"},
                                  {"strategy", "group"},
                                  {"group_size", 128},
                                  {"symmetric", true}};
         qc["format"] = group0(qc)["format"] = "pack-quantized";
       }),
       "format 'pack-quantized' is not supported"},
      {"ct marlin-24", ct_with([](json& qc) {
         group0(qc).erase("format");
         qc["format"] = "marlin-24";
       }),
       "format 'marlin-24'"},
      {"ct group strategy", ct_with([](json& qc) {
         group0(qc)["weights"]["strategy"] = "group";
         group0(qc)["weights"]["group_size"] = 128;
       }),
       "strategy 'group' is not supported"},
      {"ct asymmetric", ct_with([](json& qc) { group0(qc)["weights"]["symmetric"] = false; }),
       "symmetric false"},
      {"ct static per-channel activations", ct_with([](json& qc) {
         group0(qc)["input_activations"] = {{"num_bits", 8},
                                            {"type", "float"},
                                            {"symmetric", true},
                                            {"strategy", "channel"},
                                            {"dynamic", false}};
       }),
       "static activation scales with strategy 'channel'"},
      {"ct static activations with block weights", ct_with([](json& qc) {
         group0(qc)["weights"]["strategy"] = "block";
         group0(qc)["weights"]["block_structure"] = {128, 128};
         group0(qc)["input_activations"] = {{"num_bits", 8},
                                            {"type", "float"},
                                            {"symmetric", true},
                                            {"strategy", "tensor"},
                                            {"dynamic", false}};
       }),
       "static activation scales with block weights"},
      {"ct dynamic per-tensor activations", ct_with([](json& qc) {
         group0(qc)["input_activations"] = {
             {"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}, {"dynamic", true}};
       }),
       "dynamic activations with strategy 'tensor'"},
      {"ct kv cache", ct_with([](json& qc) {
         qc["kv_cache_scheme"] = {{"num_bits", 8},
                                  {"type", "float"},
                                  {"strategy", "tensor"},
                                  {"dynamic", false},
                                  {"symmetric", true}};
       }),
       "kv_cache_scheme"},
      {"ct block 64x64", ct_with([](json& qc) {
         group0(qc)["weights"]["strategy"] = "block";
         group0(qc)["weights"]["block_structure"] = {64, 64};
       }),
       "block_structure [64,64]"},
      {"ct nvfp4", ct_with([](json& qc) {
         group0(qc)["weights"]["num_bits"] = 4;
         group0(qc)["format"] = "nvfp4-pack-quantized";
       }),
       "nvfp4-pack-quantized"},
      {"ct unknown field", ct_with([](json& qc) { group0(qc)["weights"]["rounding"] = "up"; }),
       "weights.rounding is not a compressed-tensors field"},
  };
}

class CtRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(CtRefusal, is_refused_naming_the_file_the_method_and_what_refit_reads) {
  const Refusal r = GetParam();
  Dir dir;
  nlohmann::json config = source_config();
  config["quantization_config"] = r.quantization_config;
  std::ofstream(dir.str() + "/config.json") << config.dump(2);
  fs::create_symlink(source_dir() + "/model.safetensors", dir.path / "model.safetensors");
  EngineOptions options;
  options.model_path = dir.str();
  try {
    Engine engine(options);
    FAIL() << r.what << " loaded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(dir.str() + "/config.json"), std::string::npos) << m;
    EXPECT_NE(m.find(r.expected), std::string::npos) << m;
    EXPECT_NE(m.find("refit reads"), std::string::npos) << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CtRefusal, ::testing::ValuesIn(refusals()),
                         [](const ::testing::TestParamInfo<Refusal>& i) {
                           std::string n = i.param.what;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// The matching compressed-tensors and vLLM do: "re:" is re.match (anchored at the start, not
// the end), "Linear" every linear layer, anything else a layer name; ignore wins.
TEST(CtConfig, targets_and_ignore_match_as_compressed_tensors_does) {
  CtOptions o;
  nlohmann::json qc = ct_quantization_config(o);
  qc["config_groups"]["group_0"]["targets"] = {"re:.*self_attn", "model.layers.1.mlp.up_proj"};
  qc["ignore"] = {"lm_head", "re:model.layers.0.self_attn.k"};
  const CompressedTensorsConfig c = parse_compressed_tensors(qc, "config.json");
  EXPECT_TRUE(c.quantizes("model.layers.0.self_attn.q_proj"));   // prefix match
  EXPECT_FALSE(c.quantizes("model.layers.0.self_attn.k_proj"));  // ignored
  EXPECT_TRUE(c.quantizes("model.layers.1.mlp.up_proj"));
  EXPECT_FALSE(c.quantizes("model.layers.0.mlp.up_proj"));
  EXPECT_FALSE(c.quantizes("lm_head"));
  EXPECT_EQ(c.scheme.name(), "fp8-channel");
}

}  // namespace
}  // namespace refit
