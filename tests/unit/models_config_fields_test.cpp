// config.json fields: each honoured, known harmless, refused by name, or reported as not
// recognised (models/config_fields.h), and the readings of the rope, window, bias and
// activation fields (the logits against transformers are in cli.hf_config_fields).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/config_fields.h"
#include "models/model_config.h"

namespace refit {
namespace {

nlohmann::json llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 256},
          {"max_position_embeddings", 1024},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"hidden_act", "silu"},
          // harmless: bookkeeping, training-only, token ids, generation defaults
          {"_name_or_path", "x"},
          {"transformers_version", "4.56.0"},
          {"initializer_range", 0.02},
          {"use_cache", true},
          {"pad_token_id", nullptr},
          {"torch_dtype", "bfloat16"},
          {"pretraining_tp", 1},
          {"attention_dropout", 0.0},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"quantization_config", {{"quant_method", "fp8"}}},
          // refused fields holding their neutral value
          {"attn_logit_softcapping", nullptr},
          {"num_local_experts", 0}};
}

ModelConfig read(const nlohmann::json& j) {
  return config_from_hf_json(j.dump(), "dir/config.json");
}

std::string refusal(const nlohmann::json& j) {
  try {
    read(j);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigFields, KnownFieldsLeaveNothingUnrecognised) {
  const ModelConfig c = read(llama());
  EXPECT_TRUE(c.unrecognised_fields.empty());
  EXPECT_EQ(unrecognised_fields_warning(c, "dir/config.json"), "");
}

// The field is in no table: read, kept, and named in the load warning (not silently).
TEST(ConfigFields, UnknownFieldsAreReportedNotSilentlyIgnored) {
  nlohmann::json j = llama();
  j["my_new_field"] = 3;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"finetuned", true}};
  const ModelConfig c = read(j);
  EXPECT_EQ(c.unrecognised_fields,
            (std::vector<std::string>{"my_new_field", "rope_scaling.finetuned"}));
  EXPECT_EQ(unrecognised_fields_warning(c, "dir/config.json"),
            "dir/config.json: config fields not recognised, ignored: my_new_field, "
            "rope_scaling.finetuned");
}

// Each changes the logits; refit does not run it on Llama: a FormatError naming the file
// and the field (and the value), never a quiet wrong answer.
TEST(ConfigFields, MathFieldsRefitDoesNotRunAreRefusedByName) {
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"attn_logit_softcapping", 50.0}}, "'attn_logit_softcapping' = 50.0"},
      {{{"final_logit_softcapping", 30.0}}, "'final_logit_softcapping' = 30.0"},
      {{{"num_local_experts", 8}}, "'num_local_experts' = 8"},
      {{{"partial_rotary_factor", 0.5}}, "'partial_rotary_factor' = 0.5"},
      {{{"logits_scaling", 2.0}}, "'logits_scaling' = 2.0"},
      {{{"hidden_act", "relu"}}, "hidden_act 'relu' is not supported"},
      {{{"hidden_act", "quick_gelu"}}, "hidden_act 'quick_gelu' is not supported"},
      {{{"rope_scaling", {{"rope_type", "ntk"}, {"factor", 2.0}}}},
       "rope_scaling type 'ntk' is not supported"},
  };
  for (const auto& [change, want] : cases) {
    nlohmann::json j = llama();
    j.update(change);
    const std::string got = refusal(j);
    EXPECT_NE(got.find("dir/config.json"), std::string::npos) << got;
    EXPECT_NE(got.find(want), std::string::npos) << got;
  }
  // Phi-3 honours partial_rotary_factor; Qwen2 has no attention_bias (always q/k/v only).
  nlohmann::json q2 = llama();
  q2["architectures"] = {"Qwen2ForCausalLM"};
  q2["attention_bias"] = true;
  EXPECT_NE(refusal(q2).find("'attention_bias' = true"), std::string::npos) << refusal(q2);
}

TEST(ConfigFields, ActivationsByTransformersName) {
  const std::vector<std::pair<std::string, Activation>> names = {
      {"silu", Activation::silu},          {"swish", Activation::silu},
      {"gelu", Activation::gelu_erf},      {"gelu_pytorch_tanh", Activation::gelu_tanh},
      {"gelu_new", Activation::gelu_tanh}, {"gelu_fast", Activation::gelu_tanh}};
  for (const auto& [name, want] : names) {
    nlohmann::json j = llama();
    j["hidden_act"] = name;
    EXPECT_EQ(read(j).layer(0).activation, want) << name;
  }
}

// transformers' attention_bias means q, k, v AND o_proj; reading it as q/k/v only (refit's
// old reading) drops o_proj's bias.
TEST(ConfigFields, AttentionBiasIsQkvAndOutputMlpBiasIsGateUpDown) {
  nlohmann::json j = llama();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  const ModelConfig c = read(j);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  EXPECT_TRUE(c.mlp_bias);
  j["architectures"] = {"MistralForCausalLM"};
  EXPECT_NE(refusal(j).find("'mlp_bias' = true"), std::string::npos) << refusal(j);
}

// get_mscale(4, 0.707) / get_mscale(4, 1) as transformers' _compute_yarn_parameters; with
// mscale = mscale_all_dim the ratio is 1; with only one of them, 0.1 ln(factor) + 1.
TEST(ConfigFields, YarnAttentionFactorFromMscale) {
  auto factor = [](nlohmann::json rs) {
    nlohmann::json j = llama();
    rs["rope_type"] = "yarn";
    rs["factor"] = 4.0;
    rs["original_max_position_embeddings"] = 256;
    j["rope_scaling"] = rs;
    const ModelConfig c = read(j);
    EXPECT_TRUE(c.unrecognised_fields.empty());
    return c.rope_scaling.attention_factor;
  };
  const double m = [](double s, double k) { return 0.1 * k * std::log(s) + 1; }(4, 0.707);
  const double m1 = 0.1 * std::log(4.0) + 1;
  EXPECT_NEAR(factor({{"mscale", 0.707}, {"mscale_all_dim", 1.0}}), m / m1, 1e-6);
  EXPECT_NEAR(factor({{"mscale", 1.0}, {"mscale_all_dim", 1.0}}), 1.0, 1e-7);
  EXPECT_NEAR(factor({{"mscale", 0.707}}), m1, 1e-6);
  EXPECT_NEAR(factor({{"attention_factor", 0.5}, {"mscale", 2.0}, {"mscale_all_dim", 1.0}}), 0.5,
              1e-7);
  nlohmann::json j = llama();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", false}};
  EXPECT_FALSE(read(j).rope_scaling.truncate);
}

// vLLM's dynamic NTK: the context becomes max_position_embeddings * factor and the base is
// fixed for it (transformers recomputes it per length).
TEST(ConfigFields, DynamicNtkFixedForTheExtendedContext) {
  nlohmann::json j = llama();
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  const ModelConfig c = read(j);
  EXPECT_EQ(c.max_seq_len, 2048);
  EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::dynamic);
  const std::vector<double> f = rope_frequencies(c.layer(0).rope, c.max_seq_len);
  const double base = 10000.0 * std::pow(2.0 * 2.0 - 1.0, 16.0 / 14.0);
  for (size_t i = 0; i < f.size(); ++i)
    EXPECT_NEAR(f[i], std::pow(base, -2.0 * static_cast<double>(i) / 16.0), 1e-12 * (1 + f[i]));
}

// v5 rope_parameters per layer type: Gemma 3 rotates its sliding layers with their own
// dict; an architecture with one rotary embedding refuses dicts that differ.
TEST(ConfigFields, PerLayerTypeRopeParameters) {
  nlohmann::json j = llama();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 5e5}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5e5}}}};
  EXPECT_FLOAT_EQ(read(j).layer(0).rope.theta, 5e5f);
  j["rope_parameters"]["sliding_attention"]["rope_theta"] = 1e4;
  EXPECT_NE(refusal(j).find("different rope settings"), std::string::npos) << refusal(j);

  nlohmann::json g = j;
  g["architectures"] = {"Gemma3ForCausalLM"};
  g["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention",
                      "full_attention"};
  g["sliding_window"] = 8;
  g["rope_parameters"]["full_attention"] = {
      {"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}};
  const ModelConfig c = read(g);
  EXPECT_FLOAT_EQ(c.layer(0).rope.theta, 1e4f);
  EXPECT_EQ(c.layer(0).rope.scaling.kind, RopeScalingKind::none);
  EXPECT_EQ(c.layer(0).window, 8);
  EXPECT_FLOAT_EQ(c.layer(3).rope.theta, 1e6f);
  EXPECT_EQ(c.layer(3).rope.scaling.kind, RopeScalingKind::linear);
  EXPECT_EQ(c.layer(3).window, 0);
}

// transformers' Qwen2/Qwen3 rule: no window unless use_sliding_window; then layers >=
// max_window_layers (default 28), unless layer_types says which.
TEST(ConfigFields, QwenSlidingWindowRules) {
  nlohmann::json j = llama();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["sliding_window"] = 16;
  j["max_window_layers"] = 2;
  j["use_sliding_window"] = false;
  EXPECT_EQ(read(j).max_window(), 0);
  j["use_sliding_window"] = true;
  ModelConfig c = read(j);
  EXPECT_EQ(c.layer(1).window, 0);
  EXPECT_EQ(c.layer(2).window, 16);
  EXPECT_EQ(describe_config(c)[2], "sliding window 16 on layers 2-3");
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  c = read(j);
  EXPECT_EQ(c.layer(0).window, 16);
  EXPECT_EQ(c.layer(2).window, 16);
  EXPECT_EQ(c.layer(3).window, 0);
  j["layer_types"][1] = "chunked_attention";
  EXPECT_NE(refusal(j).find("\"chunked_attention\" is not supported"), std::string::npos);
  j.erase("layer_types");
  j.erase("max_window_layers");  // 28 > 4 layers: no sliding layer
  EXPECT_EQ(read(j).layer(3).window, 0);
}

TEST(ConfigFields, DescribeSaysWhatTheForwardPassApplies) {
  nlohmann::json j = llama();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["rope_scaling"] = {
      {"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 256}};
  j["hidden_act"] = "gelu_pytorch_tanh";
  const std::vector<std::string> d = describe_config(read(j));
  auto has = [&](const std::string& s) {
    for (const std::string& x : d)
      if (x == s) return true;
    return false;
  };
  EXPECT_TRUE(
      has("rope: theta 1e+04, yarn factor 4 (original 256, attention factor 1.139, beta "
          "fast/slow 32/1)"))
      << d[1];
  EXPECT_TRUE(has("full attention on every layer"));
  EXPECT_TRUE(has("hidden_act gelu_pytorch_tanh"));
  EXPECT_TRUE(has("q, k, v biases"));
}

}  // namespace
}  // namespace refit
