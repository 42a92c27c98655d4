// gpt-oss in Hugging Face's own layout (transformers' GptOssExperts): every layer's experts
// stacked, gate and up interleaved in `mlp.experts.gate_up_proj` [E, dim, 2I] (stored for
// x @ W), `down_proj` [E, I, dim], their biases [E, 2I] and [E, dim], or the experts as MXFP4
// `_blocks` [E, rows, K/32, 16] and `_scales` [E, rows, K/32]. Written here from the llama.cpp
// oracle GGUFs: the folder must load to the same parameters, bitwise, as the GGUF; a refit
// in the stacked forms must equal a fresh load (law L2), at the same addresses, and leave
// the sender's tensors alone; bad stacked tensors are refused and change nothing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "formats/safetensors_writer.h"
#include "formats_test_util.h"
#include "models/checkpoint_tensor_use.h"
#include "models/model_loader.h"
#include "models/quantize_model.h"
#include "oracle_runs.h"
#include "refit_test_support.h"
#include "weights/weight_update.h"

namespace refit {
namespace {

using testing::pack_gguf;
using testing::pack_run;

using testing::TempDir;
using testing::TensorMap;

std::string expert(int64_t l, int64_t e, const char* proj, const char* kind = "weight") {
  return fmt::format("model.layers.{}.mlp.experts.{}.{}.{}", l, e, proj, kind);
}
std::string stacked(int64_t l, const char* name) {
  return fmt::format("model.layers.{}.mlp.experts.{}", l, name);
}

// The stacked float forms of layer l from per-expert tensors (HF orientation [out, in]).
struct Stacked {
  Tensor gate_up, gate_up_bias, down, down_bias;
};
Stacked stack_layer(const TensorMap& w, const ModelConfig& c, int64_t l) {
  const int64_t E = c.n_experts, I = c.expert_ffn_dim, D = c.dim;
  Stacked s{Tensor::zeros({E, D, 2 * I}, DType::f32), Tensor::zeros({E, 2 * I}, DType::f32),
            Tensor::zeros({E, I, D}, DType::f32), Tensor::zeros({E, D}, DType::f32)};
  float* gu = s.gate_up.data<float>();
  float* gub = s.gate_up_bias.data<float>();
  float* dn = s.down.data<float>();
  float* dnb = s.down_bias.data<float>();
  for (int64_t e = 0; e < E; ++e) {
    const Tensor g = w.at(expert(l, e, "gate_proj")).contiguous();
    const Tensor u = w.at(expert(l, e, "up_proj")).contiguous();
    const Tensor d = w.at(expert(l, e, "down_proj")).contiguous();
    const Tensor gb = w.at(expert(l, e, "gate_proj", "bias")).contiguous();
    const Tensor ub = w.at(expert(l, e, "up_proj", "bias")).contiguous();
    const Tensor db = w.at(expert(l, e, "down_proj", "bias")).contiguous();
    for (int64_t i = 0; i < I; ++i) {
      for (int64_t k = 0; k < D; ++k) {
        gu[(e * D + k) * 2 * I + 2 * i] = g.data<const float>()[i * D + k];
        gu[(e * D + k) * 2 * I + 2 * i + 1] = u.data<const float>()[i * D + k];
      }
      gub[e * 2 * I + 2 * i] = gb.data<const float>()[i];
      gub[e * 2 * I + 2 * i + 1] = ub.data<const float>()[i];
    }
    for (int64_t r = 0; r < D; ++r) {
      for (int64_t i = 0; i < I; ++i) dn[(e * I + i) * D + r] = d.data<const float>()[r * I + i];
      dnb[e * D + r] = db.data<const float>()[r];
    }
  }
  return s;
}

// ggml's block_mxfp4 rows (e8m0 scale, then 16 bytes: element j low nibble, j + 16 high) as
// transformers' blocks (element 2i low nibble of byte i, 2i + 1 high) and scales, for the
// rows of `name` [E, rows, K] placed at rows first, first + step, ... of the HF tensors.
void ggml_mxfp4_to_hf(const GgufFile& g, const std::string& name, int64_t first, int64_t step,
                      Tensor& blocks, Tensor& scales) {
  const GgmlTensorView raw = g.raw(name);
  ASSERT_EQ(raw.type, GgmlType::mxfp4) << name;
  const int64_t E = raw.shape[0], rows = raw.shape[1], groups = raw.shape[2] / 32;
  const uint8_t* src = raw.bytes.data<const uint8_t>();
  uint8_t* b = blocks.data<uint8_t>();
  uint8_t* s = scales.data<uint8_t>();
  const int64_t hf_rows = blocks.size(1);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t q = 0; q < groups; ++q) {
        const uint8_t* blk = src + ((e * rows + r) * groups + q) * 17;
        const int64_t at = (e * hf_rows + first + r * step) * groups + q;
        s[at] = blk[0];
        uint8_t element[32];
        for (int j = 0; j < 16; ++j) {
          element[j] = blk[1 + j] & 0x0F;
          element[j + 16] = blk[1 + j] >> 4;
        }
        for (int i = 0; i < 16; ++i)
          b[at * 16 + i] = static_cast<uint8_t>(element[2 * i] | (element[2 * i + 1] << 4));
      }
}

enum class Form { f32_fused, mxfp4 };

// An HF gpt-oss folder holding the GGUF's weights: experts stacked (f32 fused, or the
// GGUF's own MXFP4 bytes re-packed as blocks and scales), every other tensor by its HF name.
std::string write_hf_gpt_oss(const TempDir& dir, const std::string& gguf, Form form) {
  auto model = load_model(gguf);
  const ModelConfig& c = model->config();
  const TensorMap weights = testing::base_weights(gguf, *model);
  auto file = GgufFile::open(gguf);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : weights)
    if (name.find(".mlp.experts.") == std::string::npos) tensors.push_back({name, t});
  const int64_t E = c.n_experts, I = c.expert_ffn_dim, D = c.dim;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Stacked s = stack_layer(weights, c, l);
    tensors.push_back({stacked(l, "gate_up_proj_bias"), s.gate_up_bias});
    tensors.push_back({stacked(l, "down_proj_bias"), s.down_bias});
    if (form == Form::f32_fused) {
      tensors.push_back({stacked(l, "gate_up_proj"), s.gate_up});
      tensors.push_back({stacked(l, "down_proj"), s.down});
      continue;
    }
    Tensor gu_blocks = Tensor::zeros({E, 2 * I, D / 32, 16}, DType::u8);
    Tensor gu_scales = Tensor::zeros({E, 2 * I, D / 32}, DType::u8);
    Tensor dn_blocks = Tensor::zeros({E, D, I / 32, 16}, DType::u8);
    Tensor dn_scales = Tensor::zeros({E, D, I / 32}, DType::u8);
    ggml_mxfp4_to_hf(*file, fmt::format("blk.{}.ffn_gate_exps.weight", l), 0, 2, gu_blocks,
                     gu_scales);
    ggml_mxfp4_to_hf(*file, fmt::format("blk.{}.ffn_up_exps.weight", l), 1, 2, gu_blocks,
                     gu_scales);
    ggml_mxfp4_to_hf(*file, fmt::format("blk.{}.ffn_down_exps.weight", l), 0, 1, dn_blocks,
                     dn_scales);
    tensors.push_back({stacked(l, "gate_up_proj_blocks"), gu_blocks});
    tensors.push_back({stacked(l, "gate_up_proj_scales"), gu_scales});
    tensors.push_back({stacked(l, "down_proj_blocks"), dn_blocks});
    tensors.push_back({stacked(l, "down_proj_scales"), dn_scales});
  }
  write_safetensors(dir.file("model.safetensors"), tensors);
  nlohmann::json layer_types = nlohmann::json::array();
  for (int64_t l = 0; l < c.n_layers; ++l)
    layer_types.push_back(c.layer(l).window > 0 ? "sliding_attention" : "full_attention");
  int64_t window = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) window = std::max(window, c.layer(l).window);
  nlohmann::json j = {{"architectures", {"GptOssForCausalLM"}},
                      {"model_type", "gpt_oss"},
                      {"hidden_size", c.dim},
                      {"num_hidden_layers", c.n_layers},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"head_dim", c.head_dim},
                      {"intermediate_size", c.expert_ffn_dim},
                      {"vocab_size", c.vocab_size},
                      {"max_position_embeddings", c.max_seq_len},
                      {"rms_norm_eps", c.rms_eps},
                      {"rope_theta", c.rope_theta},
                      {"tie_word_embeddings", false},
                      {"attention_bias", true},
                      {"num_local_experts", c.n_experts},
                      {"num_experts_per_tok", c.n_experts_used},
                      {"sliding_window", window},
                      {"layer_types", layer_types},
                      {"swiglu_limit", c.swiglu_limit},
                      {"torch_dtype", "float32"}};
  if (form == Form::mxfp4)
    j["quantization_config"] = {{"quant_method", "mxfp4"},
                                {"modules_to_not_convert",
                                 {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                  "model.embed_tokens", "lm_head"}}};
  std::ofstream(dir.file("config.json")) << j.dump(2);
  return dir.path.string();
}

// A model created for a checkpoint and quantized as the engine quantizes it (as stored).
std::unique_ptr<Model> load_as_engine(const std::string& path, const std::string& quant = "none") {
  auto ck = Checkpoint::open(path);
  ModelConfig config = read_model_config(*ck);
  auto model = create_model(config, config.weight_dtype);
  quantize_for_checkpoint(*model, *ck, parse_quant_scheme(quant));
  load_weights(*model, *ck);
  return model;
}

TEST(GptOssHf, FusedInterleavedFolderLoadsBitwiseAsTheGguf) {
  for (const char* folder : {"gpt-oss-f32", "gpt-oss-swa-f32"}) {
    SCOPED_TRACE(folder);
    TempDir dir;
    const std::string hf = write_hf_gpt_oss(dir, pack_gguf(folder), Form::f32_fused);
    auto from_gguf = load_model(pack_gguf(folder));
    auto from_hf = load_model(hf);
    testing::expect_same_bytes(*from_hf, *from_gguf, "HF fused vs GGUF");
    const testing::RefRun r = pack_run(folder, "the_quick_brown_fox");
    EXPECT_EQ(testing::teacher_forced(*from_hf, r.sequence),
              testing::teacher_forced(*from_gguf, r.sequence));
    // Every tensor of the folder is one the model takes (its stacked forms included).
    auto ck = Checkpoint::open(hf);
    EXPECT_EQ(unknown_checkpoint_tensors(*ck, from_hf->config(), from_hf->config(),
                                         from_hf->parameters()),
              std::vector<std::string>{});
  }
}

TEST(GptOssHf, Mxfp4BlocksServeAsTheGgufsMxfp4Experts) {
  TempDir dir;
  const std::string gguf = pack_gguf("gpt-oss-mxfp4");
  const std::string hf = write_hf_gpt_oss(dir, gguf, Form::mxfp4);
  auto ck = Checkpoint::open(hf);
  EXPECT_EQ(checkpoint_expert_scheme(*ck).method, QuantMethod::mxfp4);
  EXPECT_FALSE(checkpoint_quant_scheme(*ck).enabled()) << "attention is float in the folder";
  // Served as stored, both keep the experts in MXFP4 and everything else in f32.
  auto from_gguf = load_as_engine(gguf);
  auto from_hf = load_as_engine(hf);
  const ModelConfig& c = from_hf->config();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(from_hf->parameters().get(stacked(l, "w13_weight")).quantization().method,
              QuantMethod::mxfp4);
    EXPECT_FALSE(from_hf->parameters()
                     .get(fmt::format("model.layers.{}.self_attn.qkv_proj.weight", l))
                     .quantized());
  }
  testing::expect_same_bytes(*from_hf, *from_gguf, "HF MXFP4 vs GGUF MXFP4");
  // --quant mxfp4-w8a8 (int8 activations) applies to the MXFP4 experts alone, as the file's
  // own codes; attention stays float.
  auto w8a8 = load_as_engine(gguf, "mxfp4-w8a8");
  EXPECT_TRUE(w8a8->parameters().get(stacked(1, "w13_weight")).quantization().w8a8);
  EXPECT_FALSE(w8a8->parameters().get("model.layers.1.self_attn.qkv_proj.weight").quantized());
  // Read by value (f32 parameters), the blocks decode to the GGUF's values exactly.
  testing::expect_same_bytes(*load_model(hf), *load_model(gguf), "decoded HF vs GGUF");
}

// Law L2 through the stacked forms: the fused float tensors of one layer, its biases, and
// MXFP4 blocks with scales, each bitwise a fresh load of the same values, addresses unchanged,
// the sender's tensors untouched.
TEST(GptOssHf, RefitInStackedFormsIsBitwiseAFreshLoad) {
  TempDir dir;
  const std::string hf = write_hf_gpt_oss(dir, pack_gguf("gpt-oss-f32"), Form::f32_fused);
  auto model = load_model(hf);
  const ModelConfig& c = model->config();
  const auto before = testing::addresses(*model);
  TensorMap current = testing::base_weights(hf, *model);
  const TensorMap changed = testing::perturbed(current, 41, DType::f32);
  const Stacked s = stack_layer(changed, c, 2);
  const Tensor sent = s.gate_up.clone();
  {
    WeightUpdate update(model->parameters(), {});
    update.update(stacked(2, "gate_up_proj"), s.gate_up);
    update.update(stacked(2, "down_proj_bias"), s.down_bias);
    EXPECT_EQ(update.report().tensors.size(), static_cast<size_t>(3 * c.n_experts));
    update.apply();
  }
  EXPECT_EQ(std::memcmp(sent.data<const float>(), s.gate_up.data<const float>(), sent.nbytes()), 0)
      << "the update changed the sender's tensor";
  for (int64_t e = 0; e < c.n_experts; ++e)
    for (std::string n :
         {expert(2, e, "gate_proj"), expert(2, e, "up_proj"), expert(2, e, "down_proj", "bias")})
      current[n] = changed.at(n);
  auto fresh = testing::fresh_model(c, {}, current, "", "");
  testing::expect_same_bytes(*model, *fresh, "stacked refit vs fresh");
  EXPECT_EQ(testing::addresses(*model), before);

  // In bf16, the form a trainer sends (transformers keeps gpt-oss's experts in bf16): layer 3's
  // down_proj, converted as a fresh load of those bf16 values converts them.
  const Tensor down_bf16 = stack_layer(changed, c, 3).down.to(DType::bf16);
  {
    WeightUpdate update(model->parameters(), {});
    update.update(stacked(3, "down_proj"), down_bf16);
    update.apply();
  }
  for (int64_t e = 0; e < c.n_experts; ++e)
    current[expert(3, e, "down_proj")] =
        down_bf16.select(0, e).transpose(0, 1).contiguous().to(DType::f32);
  testing::expect_same_bytes(*model, *testing::fresh_model(c, {}, current, "", ""),
                             "bf16 stacked refit vs fresh");
  EXPECT_EQ(testing::addresses(*model), before);

  // Expert e's gate rows hold the even columns of what was sent for it.
  for (int64_t e = 0; e < c.n_experts; ++e) {
    const Parameter& w13 = model->parameters().get(stacked(2, "w13_weight"));
    const Tensor gate = w13.data().narrow(0, e * 2 * c.expert_ffn_dim, c.expert_ffn_dim);
    EXPECT_EQ(gate.to_floats(), s.gate_up.select(0, e)
                                    .transpose(0, 1)
                                    .slice(0, 0, 2 * c.expert_ffn_dim, 2)
                                    .contiguous()
                                    .to_floats())
        << "expert " << e;
  }
}

TEST(GptOssHf, RefitFromMxfp4BlocksAndScalesIsBitwiseAFreshLoad) {
  TempDir mx_dir;
  const std::string mx = write_hf_gpt_oss(mx_dir, pack_gguf("gpt-oss-mxfp4"), Form::mxfp4);
  auto model = load_as_engine(mx);
  const auto before = testing::addresses(*model);
  // Another MXFP4 checkpoint's layer-1 gate/up experts: the file's own bytes with the
  // experts in reverse order.
  auto ck = Checkpoint::open(mx);
  const Tensor blocks = ck->hf()->tensor(stacked(1, "gate_up_proj_blocks")).clone();
  const Tensor scales = ck->hf()->tensor(stacked(1, "gate_up_proj_scales")).clone();
  const int64_t E = blocks.size(0);
  Tensor swapped_b = blocks.clone(), swapped_s = scales.clone();
  for (int64_t e = 0; e < E; ++e) {
    swapped_b.select(0, e).copy_from(blocks.select(0, E - 1 - e));
    swapped_s.select(0, e).copy_from(scales.select(0, E - 1 - e));
  }
  {
    WeightUpdate update(model->parameters(), {});
    update.update(stacked(1, "gate_up_proj_scales"), swapped_s);  // either order
    update.update(stacked(1, "gate_up_proj_blocks"), swapped_b);
    update.apply();
  }
  EXPECT_EQ(testing::addresses(*model), before);
  // Bitwise what a fresh engine on a folder holding the swapped tensors serves.
  const TensorMap stored = testing::base_weights(mx, *model);
  TensorMap values = stored;
  for (int64_t e = 0; e < E; ++e)
    for (const char* p : {"gate_proj", "up_proj"})
      values[expert(1, e, p)] = stored.at(expert(1, E - 1 - e, p));
  auto fresh_q = create_model(model->config(), DType::f32);
  quantize_for_checkpoint(*fresh_q, *ck, QuantScheme{});
  for (const std::string& name : fresh_q->parameters().checkpoint_names()) {
    CheckpointTarget t = fresh_q->parameters().target(name);
    t.parameter->load(*t.sub_shard, values.at(name));
  }
  testing::expect_same_bytes(*model, *fresh_q, "MXFP4 refit vs fresh");
}

TEST(GptOssHf, BadStackedTensorsAreRefusedAndChangeNothing) {
  TempDir dir;
  const std::string hf = write_hf_gpt_oss(dir, pack_gguf("gpt-oss-f32"), Form::f32_fused);
  auto model = load_model(hf);
  const ModelConfig& c = model->config();
  auto snapshot = load_model(hf);
  const int64_t E = c.n_experts, I = c.expert_ffn_dim, D = c.dim;
  auto refused = [&](const std::string& name, const Tensor& t, const std::string& says) {
    WeightUpdate update(model->parameters(), {});
    try {
      update.update(name, t);
      update.apply();
      ADD_FAILURE() << name << " " << t.str() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    testing::expect_same_bytes(*model, *snapshot, "after a refused " + name);
  };
  // [E, 2I, dim], the per-expert orientation stacked: not the HF form, refused by shape.
  refused(stacked(0, "gate_up_proj"), Tensor::zeros({E, 2 * I, D}, DType::f32), "gate_up_proj");
  refused(stacked(0, "down_proj"), Tensor::zeros({E, D, I}, DType::f32), "[8, 96, 128]");
  Tensor nan = stack_layer(testing::base_weights(hf, *model), c, 0).gate_up;
  nan.data<float>()[5] = std::nanf("");
  refused(stacked(0, "gate_up_proj"), nan, "is nan");
  // Blocks without their scales cannot commit.
  refused(stacked(0, "down_proj_blocks"), Tensor::zeros({E, D, I / 32, 16}, DType::u8),
          "down_proj_scales");
  Tensor bad_scales = Tensor::zeros({E, D, I / 32}, DType::u8);
  bad_scales.data<uint8_t>()[3] = 0xFF;
  {
    WeightUpdate update(model->parameters(), {});
    update.update(stacked(0, "down_proj_blocks"), Tensor::zeros({E, D, I / 32, 16}, DType::u8));
    EXPECT_THROW(update.update(stacked(0, "down_proj_scales"), bad_scales), Error);
    EXPECT_THROW(update.apply(), Error);
  }
  testing::expect_same_bytes(*model, *snapshot, "after refused MXFP4 scales");
}

}  // namespace
}  // namespace refit
