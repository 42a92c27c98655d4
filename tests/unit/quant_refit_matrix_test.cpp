// Law L2 for quantized weights: for every scheme x layout (plain, shuffled; interleaved for
// q8_0-w8a8, on a model whose rows hold whole runs of 16 blocks) x TP 1/2 and
// updates of all weights, a random subset, shuffled order and three repeats, refit from
// bf16/f32 tensors leaves every stored byte (codes and scales) and the logits equal to a
// fresh quantized load of the same weights, and no storage (codes or scales) moves.
// Also: a partial reload of one sub-shard of a fused QKV/gate-up weight changes only that
// sub-shard's bytes and scales; GGUF Q8_0/MXFP4 and online Q8_0 of the F32 file agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "core/error.h"
#include "dist/local_group.h"
#include "formats_test_util.h"
#include "models/model_loader.h"
#include "models/quantize_model.h"
#include "parallel/weight_readback.h"
#include "refit_test_support.h"
#include "runtime/engine.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"
#include "weights/layout_transform.h"

namespace refit {
namespace {

const std::string kLlamaCpp = std::string(REFIT_SHARED_DIR) + "/oracle/llamacpp";
const std::string kLlamaF32 = kLlamaCpp + "/llama-f32/micro-llama-f32-s1.gguf";

using namespace refit::testing;

struct QuantCase {
  std::string quant, layout;
  int tp;
  bool wide = false;  // wide_model() instead of the micro llama
};
// How gtest shows a case (instead of its bytes).
void PrintTo(const QuantCase& c, std::ostream* os) {
  *os << c.quant << ", " << c.layout << ", TP " << c.tp << (c.wide ? ", wide" : "");
}

// The micro llama's rows are shorter than one run of 16 Q8_0 blocks, which the interleave
// leaves alone: this f32 GGUF has rows of 18 and 34 blocks (17 and 9 per TP-2 rank), one
// or two whole runs and a tail, written once per process.
const std::string& wide_model() {
  static TempDir dir;
  static const std::string path = [] {
    ModelConfig config = synthetic_preset(Architecture::llama, "tiny");
    config.dim = 576, config.n_heads = 8, config.n_kv_heads = 4, config.head_dim = 72;
    config.ffn_dim = 1088, config.n_layers = 2,
    config.vocab_size = 9216;  // logits_of reads id 9038
    const std::string file = dir.file("wide-f32.gguf");
    SyntheticCheckpointOptions synth;
    synth.seed = 3;
    write_synthetic_gguf(file, config, synth);
    return file;
  }();
  return path;
}

class QuantRefitMatrix : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantRefitMatrix, refit_from_bf16_equals_fresh_quantized_load_bitwise_with_stable_storage) {
  const QuantCase c = GetParam();
  run_ranks(c.tp, [&](int rank, std::shared_ptr<Communicator> comm) {
    EngineOptions options;
    options.model_path = c.wide ? wide_model() : kLlamaF32;
    options.quant = c.quant;
    options.layout = c.layout;
    options.tp = c.tp;
    options.communicator = comm;
    Engine engine(options);
    Model& model = engine.mutable_model();
    const TensorParallel& tp = model.tensor_parallel();
    const Parameter& qkv = model.parameters().get("model.layers.0.self_attn.qkv_proj.weight");
    ASSERT_TRUE(qkv.quantized());
    EXPECT_EQ(qkv.quantization().name(), parse_quant_scheme(c.quant).name());
    if (c.layout == "shuffle") {
      EXPECT_EQ(qkv.data().layout(), Layout::shuffled_16x16);
    }
    if (c.layout == "interleave") {
      EXPECT_EQ(qkv.data().layout(), Layout::interleaved_4x16);
    }
    const auto before = addresses(model);
    const TensorMap base = base_weights(options.model_path, model);
    uint64_t version = engine.weight_version();
    auto names = model.parameters().checkpoint_names();
    std::mt19937 rng(42);  // the same order on every rank

    // 1. Every weight, shuffled order, bf16 (what a trainer sends).
    TensorMap target1 = perturbed(base, 1, DType::bf16);
    std::shuffle(names.begin(), names.end(), rng);
    {
      std::vector<std::pair<std::string, Tensor>> batch;
      for (const auto& n : names) batch.emplace_back(n, target1.at(n));
      EXPECT_EQ(engine.update_weights_from_tensors(batch), ++version);
    }
    auto fresh1 = fresh_model(model.config(), tp, target1, c.quant, c.layout);
    expect_same_bytes(model, *fresh1, "all weights");
    EXPECT_EQ(logits_of(model), logits_of(*fresh1));

    // 2. A random subset (single sub-shards of fused weights included), as a transaction.
    TensorMap target2 = perturbed(base, 2, DType::bf16);
    TensorMap expected2 = target1;
    auto update = engine.begin_update();
    for (const auto& n : names)
      if (rng() % 3 == 0) {
        update->update(n, target2.at(n));
        expected2[n] = target2.at(n);
      }
    engine.commit(*update);
    EXPECT_EQ(engine.weight_version(), ++version);
    auto fresh2 = fresh_model(model.config(), tp, expected2, c.quant, c.layout);
    expect_same_bytes(model, *fresh2, "subset");
    EXPECT_EQ(logits_of(model), logits_of(*fresh2));

    // 3. Repeated three times, f32, reshuffled each time.
    TensorMap target3 = perturbed(base, 3, DType::f32);
    for (int repeat = 0; repeat < 3; ++repeat) {
      std::shuffle(names.begin(), names.end(), rng);
      std::vector<std::pair<std::string, Tensor>> batch;
      for (const auto& n : names) batch.emplace_back(n, target3.at(n));
      engine.update_weights_from_tensors(batch);
    }
    version += 3;
    EXPECT_EQ(engine.weight_version(), version);
    auto fresh3 = fresh_model(model.config(), tp, target3, c.quant, c.layout);
    expect_same_bytes(model, *fresh3, "repeated");
    EXPECT_EQ(logits_of(model), logits_of(*fresh3));
    EXPECT_EQ(addresses(model), before) << "a storage moved (rank " << rank << ")";
  });
}

std::vector<QuantCase> quant_matrix() {
  std::vector<QuantCase> cases;
  for (const char* quant :
       {"fp8-tensor", "fp8-channel-w8a8", "fp8-block", "mxfp4", "q8_0", "mxfp4-w8a8", "q8_0-w8a8"})
    for (const char* layout : {"plain", "shuffle"})
      for (int tp : {1, 2}) cases.push_back({quant, layout, tp});
  for (int tp : {1, 2}) cases.push_back({"q8_0-w8a8", "interleave", tp, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(L2, QuantRefitMatrix, ::testing::ValuesIn(quant_matrix()),
                         [](const auto& info) {
                           std::string name = info.param.quant + "_" + info.param.layout + "_tp" +
                                              std::to_string(info.param.tp) +
                                              (info.param.wide ? "_wide" : "");
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// Each stored byte derives from one checkpoint tensor: reloading q_proj alone rewrites
// q's rows (codes and scales) and leaves k's and v's bytes exactly as they were.
TEST(QuantSubShards, reloading_q_proj_alone_cannot_change_k_or_v) {
  for (const char* quant : {"fp8-tensor", "fp8-block", "mxfp4", "q8_0"}) {
    EngineOptions options;
    options.model_path = kLlamaF32;
    options.quant = quant;
    options.layout = "shuffle";
    Engine engine(options);
    const Parameter& qkv =
        engine.model().parameters().get("model.layers.1.self_attn.qkv_proj.weight");
    const int64_t rows = qkv.local_shape()[0];
    const int64_t code_row = static_cast<int64_t>(qkv.data().nbytes()) / rows;
    const int64_t scale_row = static_cast<int64_t>(qkv.scale().nbytes()) / rows;
    auto bytes = [](const Tensor& t) {
      const auto* p = static_cast<const uint8_t*>(t.raw_data());
      return std::vector<uint8_t>(p, p + t.nbytes());
    };
    const auto codes0 = bytes(qkv.data()), scales0 = bytes(qkv.scale());
    const std::string q = "model.layers.1.self_attn.q_proj.weight";
    const TensorMap base = base_weights(kLlamaF32, engine.model());
    // Scale q by 3: a shared (non-sub-shard) scale would move k's and v's codes.
    Tensor q3 = Tensor::from_floats(base.at(q).shape(), [&] {
      auto v = base.at(q).to_floats();
      for (float& x : v) x *= 3.0f;
      return v;
    }());
    engine.update_weights_from_tensors({{q, q3}});
    const auto codes1 = bytes(qkv.data()), scales1 = bytes(qkv.scale());
    const int64_t q_rows = qkv.sub_shards()[0].local_rows;
    EXPECT_NE(std::memcmp(codes0.data(), codes1.data(), q_rows * code_row) == 0 &&
                  std::memcmp(scales0.data(), scales1.data(), q_rows * scale_row) == 0,
              true)
        << quant << ": q's bytes did not change";
    EXPECT_EQ(std::memcmp(codes0.data() + q_rows * code_row, codes1.data() + q_rows * code_row,
                          (rows - q_rows) * code_row),
              0)
        << quant << ": k/v codes changed";
    EXPECT_EQ(std::memcmp(scales0.data() + q_rows * scale_row, scales1.data() + q_rows * scale_row,
                          (rows - q_rows) * scale_row),
              0)
        << quant << ": k/v scales changed";
  }
}

// Decoded stored weights of a quantized engine, parameter by parameter, plain order.
std::map<std::string, std::vector<float>> decoded(const Model& m) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& p : m.parameters().all()) {
    if (!p->quantized()) continue;
    const int64_t n = p->local_shape()[0], k = p->local_shape()[1];
    std::vector<float> v(static_cast<size_t>(n * k));
    dequantize_rows(p->quantization(), p->data().raw_data(), p->scale().raw_data(), n, k, v.data());
    out[p->name()] = std::move(v);
  }
  return out;
}

// GGUF Q8_0 and MXFP4 files are served quantized, with exactly the file's values; and
// --quant q8_0 on the F32 file stores what llama-quantize wrote into the Q8_0 file.
TEST(QuantNativeGguf, quantized_files_are_served_quantized_with_their_exact_values) {
  for (const char* type : {"q8_0", "mxfp4"}) {
    const std::string path = kLlamaCpp + "/llama-" + type + "/micro-llama-" + type + "-s1.gguf";
    EngineOptions options;
    options.model_path = path;
    Engine engine(options);
    const Model& model = engine.model();
    EXPECT_NE(engine.description().find(type), std::string::npos) << engine.description();
    const TensorMap file = base_weights(path, model);  // the reader's decoded values
    auto values = decoded(model);
    ASSERT_EQ(values.size(), 17u) << type;  // 4 layers x (qkv, o, gate_up, down) + the output
    for (const auto& p : model.parameters().all()) {
      if (!p->quantized()) continue;
      std::vector<float> want;
      for (const SubShard& s : p->sub_shards()) {
        auto v = file.at(s.checkpoint_name).to_floats();
        want.insert(want.end(), v.begin(), v.end());
      }
      EXPECT_EQ(values.at(p->name()), want) << type << " " << p->name();
    }
  }
  EngineOptions online;
  online.model_path = kLlamaF32;
  online.quant = "q8_0";
  Engine from_f32(online);
  EngineOptions native;
  native.model_path = kLlamaCpp + "/llama-q8_0/micro-llama-q8_0-s1.gguf";
  Engine from_q8(native);
  // (Only the linear weights: the Q8_0 file's embedding and output are Q8_0 too, and
  // refit serves those decoded.)
  expect_same_bytes(from_f32.model(), from_q8.model(), "online q8_0 vs llama-quantize", true);
}

// An output projection stored as Q8_0 (llama-quantize's default) is served quantized:
// untied, its own parameter; tied, the embedding table, whose lookups then decode rows.
// The head's matmul reads the file's codes, its values are the file's, and the logits
// equal those of a model holding the same values as f32 (the quantized kernel sums in the
// float kernel's order, a decoded row is the dequantized row), under TP 1 and 2. A refit
// of it re-quantizes in place.
TEST(QuantNativeGguf, a_q8_0_output_tied_or_not_is_served_quantized_with_the_float_heads_logits) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    ModelConfig config = synthetic_preset(Architecture::llama, "tiny");
    config.n_layers = 2;
    config.tied_embeddings = tied;
    TempDir dir;
    const std::string path = dir.file("q8_0.gguf");
    SyntheticCheckpointOptions synth;
    synth.gguf_q8_0 = true;
    synth.seed = 5;
    write_synthetic_gguf(path, config, synth);
    const std::string head_name = tied ? "model.embed_tokens.weight" : "lm_head.weight";
    for (int world : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "tp " << world);
      run_ranks(world, [&](int rank, std::shared_ptr<Communicator> comm) {
        EngineOptions options;
        options.model_path = path;
        options.tp = world;
        options.communicator = comm;
        Engine engine(options);
        Model& model = engine.mutable_model();
        const Parameter& head = model.parameters().get(head_name);
        ASSERT_TRUE(head.quantized());
        EXPECT_EQ(head.quantization().name(), "q8_0");
        if (!tied) {
          EXPECT_FALSE(model.parameters().get("model.embed_tokens.weight").quantized());
        }
        // The same values (the reader's decoded Q8_0) with an f32 head.
        const TensorMap values = base_weights(path, model);
        auto reference = fresh_model(model.config(), model.tensor_parallel(), values, "q8_0", "");
        ASSERT_FALSE(reference->parameters().get(head_name).quantized());
        const std::vector<float> got = logits_of(model), want = logits_of(*reference);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << "rank " << rank;
        if (world > 1) return;
        // Refit of the head from bf16: the bytes a fresh quantization of the same tensor
        // gives, in the same storage.
        const void* codes = head.data().raw_data();
        const void* scales = head.scale().raw_data();
        const Tensor sent = perturbed(values, 7, DType::bf16).at(head_name);
        engine.update_weights_from_tensors({{head_name, sent}});
        Parameter fresh(head_name, head.logical_shape(), DType::f32);
        fresh.set_quantization(parse_quant_scheme("q8_0"));
        fresh.load(sent);
        EXPECT_EQ(head.data().raw_data(), codes);
        EXPECT_EQ(head.scale().raw_data(), scales);
        EXPECT_EQ(
            0, std::memcmp(head.data().raw_data(), fresh.data().raw_data(), fresh.data().nbytes()));
        EXPECT_EQ(0, std::memcmp(head.scale().raw_data(), fresh.scale().raw_data(),
                                 fresh.scale().nbytes()));
      });
    }
    // Asking for the file's own method by name (here to add int8 activations) keeps the
    // quantized head and the file's codes; another method keeps the head float, as vLLM's
    // online quantization leaves lm_head alone.
    EngineOptions same;
    same.model_path = path;
    same.quant = "q8_0-w8a8";
    Engine w8a8(same);
    EXPECT_EQ(w8a8.model().parameters().get(head_name).quantization().name(), "q8_0-w8a8");
    EngineOptions native;
    native.model_path = path;
    Engine plain(native);
    for (const auto& p : plain.model().parameters().all()) {
      if (!p->quantized()) continue;
      const Parameter& q = w8a8.model().parameters().get(p->name());
      ASSERT_TRUE(q.quantized()) << p->name();
      // The int8-activation kernel may read its codes interleaved (layout "auto" on a CPU
      // with AVX-512 VNNI): the same codes in another order within each row.
      Tensor codes = q.data();
      if (codes.layout() == Layout::interleaved_4x16) codes = deinterleave_4x16(codes);
      EXPECT_EQ(0, std::memcmp(codes.raw_data(), p->data().raw_data(), p->data().nbytes()))
          << p->name();
      EXPECT_EQ(0, std::memcmp(q.scale().raw_data(), p->scale().raw_data(), p->scale().nbytes()))
          << p->name();
    }
    EngineOptions other;
    other.model_path = path;
    other.quant = "mxfp4";
    Engine requested(other);
    EXPECT_FALSE(requested.model().parameters().get(head_name).quantized());
  }
}

// What a quantized parameter exports as its values: the reference codes decoded, in plain
// row order, whatever kernel layout holds them.
TEST(QuantParameter, dequantized_is_the_decoded_reference_in_every_layout) {
  const int64_t n = 32, k = 1088;  // 34 blocks: two runs of 16 and a tail; 32-byte MXFP4 tiles
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = dist(rng);
  const Tensor weights = Tensor::from_floats({n, k}, w);
  for (const char* name : {"q8_0", "q8_0-w8a8", "mxfp4", "fp8", "fp8-channel", "fp8-block"}) {
    const QuantScheme s = parse_quant_scheme(name);
    std::vector<uint8_t> codes(static_cast<size_t>(n * code_row_bytes(s, k)));
    std::vector<uint8_t> scales(static_cast<size_t>(n * s.scale_cols(k)) *
                                dtype_nbytes(s.scale_dtype(), 1));
    quantize_rows(s, w.data(), n, k, codes.data(), scales.data());
    std::vector<float> want(w.size());
    dequantize_rows(s, codes.data(), scales.data(), n, k, want.data());
    std::vector<std::optional<LayoutTransform>> layouts = {std::nullopt,
                                                           LayoutTransform::shuffle_16x16};
    if (s.w8a8) layouts.push_back(LayoutTransform::interleave_4x16);
    for (const auto& layout : layouts) {
      SCOPED_TRACE(std::string(name) + " " + (layout ? layout_transform_name(*layout) : "plain"));
      Parameter p("w", Shape{n, k}, DType::f32);
      p.set_quantization(s);
      if (layout) p.apply_transform(*layout);
      p.load(weights);
      const Tensor got = p.dequantized();
      ASSERT_EQ(got.shape(), (Shape{n, k}));
      EXPECT_EQ(0, std::memcmp(got.raw_data(), want.data(), want.size() * sizeof(float)));
    }
  }
  Parameter plain("w", Shape{n, k}, DType::f32);
  EXPECT_THROW(plain.dequantized(), Error);
}

// /get_weights_by_name on a quantized engine reads the decoded values, whatever kernel
// layout holds the codes: a fused q/k/v's k rows and a truncated read of down_proj.
TEST(QuantEngine, weights_read_back_by_name_are_the_decoded_values) {
  for (const char* layout : {"interleave", "shuffle"}) {
    SCOPED_TRACE(layout);
    EngineOptions options;
    options.model_path = wide_model();
    options.quant = std::string(layout) == "interleave" ? "q8_0-w8a8" : "mxfp4";
    options.layout = layout;
    Engine engine(options);
    const Parameter& qkv =
        engine.model().parameters().get("model.layers.0.self_attn.qkv_proj.weight");
    const Parameter& down = engine.model().parameters().get("model.layers.0.mlp.down_proj.weight");
    EXPECT_NE(down.data().layout(), Layout::strided);
    const CheckpointTarget k =
        engine.model().parameters().target("model.layers.0.self_attn.k_proj.weight");
    const WeightPiece kp =
        local_weight_piece(engine, "model.layers.0.self_attn.k_proj.weight", 1 << 30);
    ASSERT_EQ(kp.status, 200) << kp.error;
    EXPECT_EQ(kp.dtype, "f32");
    const Tensor want =
        qkv.dequantized().narrow(0, k.sub_shard->local_row_offset, k.sub_shard->local_rows);
    EXPECT_EQ(kp.values.to_floats(), want.contiguous().to_floats());
    const WeightPiece dp = local_weight_piece(engine, "model.layers.0.mlp.down_proj.weight", 100);
    ASSERT_EQ(dp.status, 200) << dp.error;
    ASSERT_EQ(dp.values.size(0), 1);  // the leading row holds the first 100 values
    EXPECT_EQ(dp.values.to_floats(), down.dequantized(0, 1).to_floats());
    // Rows read on their own equal the same rows of the whole (tiles cut at any row).
    EXPECT_EQ(down.dequantized(5, 20).to_floats(),
              down.dequantized().narrow(0, 5, 20).contiguous().to_floats());
  }
}

TEST(QuantParameter, quantization_is_chosen_at_creation_and_refused_after) {
  Parameter p("w", Shape{32, 64}, DType::f32);
  p.load(Tensor::zeros({32, 64}, DType::f32));
  EXPECT_THROW(p.set_quantization(parse_quant_scheme("q8_0")), Error);
  Parameter odd("w2", Shape{16, 48}, DType::f32);
  EXPECT_NE(odd.quantization_unsupported_reason(parse_quant_scheme("mxfp4")), "");
  EXPECT_EQ(odd.quantization_unsupported_reason(parse_quant_scheme("fp8-block")), "");
  Parameter t("w3", Shape{32, 64}, DType::f32);
  t.set_quantization(parse_quant_scheme("fp8-channel"));
  EXPECT_NE(t.transform_unsupported_reason(LayoutTransform::transpose), "");
  t.apply_transform(LayoutTransform::shuffle_16x16);
  EXPECT_THROW(t.apply_transform(LayoutTransform::shuffle_16x16), Error);
  // The interleave is a layout of Q8_0 codes for the int8-activation kernel only, and a
  // weight takes one kernel layout.
  EXPECT_NE(t.transform_unsupported_reason(LayoutTransform::interleave_4x16), "");
  Parameter f("w4", Shape{32, 1024}, DType::f32);
  EXPECT_NE(f.transform_unsupported_reason(LayoutTransform::interleave_4x16), "");
  for (const char* other : {"q8_0", "mxfp4-w8a8", "fp8-channel-w8a8"}) {
    Parameter q("w5", Shape{32, 1024}, DType::f32);
    q.set_quantization(parse_quant_scheme(other));
    EXPECT_NE(q.transform_unsupported_reason(LayoutTransform::interleave_4x16), "") << other;
  }
  Parameter il("w6", Shape{32, 1024}, DType::f32);
  il.set_quantization(parse_quant_scheme("q8_0-w8a8"));
  EXPECT_EQ(il.transform_unsupported_reason(LayoutTransform::interleave_4x16), "");
  il.apply_transform(LayoutTransform::interleave_4x16);
  EXPECT_EQ(il.data().layout(), Layout::interleaved_4x16);
  EXPECT_EQ(il.scale().layout(), Layout::strided);
  EXPECT_THROW(il.apply_transform(LayoutTransform::interleave_4x16), Error);
  EXPECT_THROW(il.apply_transform(LayoutTransform::shuffle_16x16), Error);
  // Its own codes sent back (what state_dict() exports) are refused, saying why.
  try {
    il.load(Tensor::zeros({32, 1024}, DType::i8));
    ADD_FAILURE() << "int8 codes were taken as a weight";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stored q8_0-w8a8 and re-quantizes what it is sent"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_quant_scheme("int3"), Error);
  EXPECT_THROW(parse_quant_scheme("int3-w8a8"), Error);
  EXPECT_THROW(parse_quant_scheme("-w8a8"), Error);
  for (const char* name : {"q8_0-w8a8", "mxfp4-w8a8", "fp8-block-w8a8"}) {
    const QuantScheme s = parse_quant_scheme(name);
    EXPECT_TRUE(s.w8a8) << name;
    EXPECT_EQ(s.name(), name);
  }
  EXPECT_TRUE(parse_quant_scheme("q8_0-w8a8").int8_activations());
  EXPECT_FALSE(parse_quant_scheme("fp8-channel-w8a8").int8_activations());
}

TEST(QuantEngine, named_parameters_export_scales_as_their_own_tensors) {
  EngineOptions options;
  options.model_path = kLlamaF32;
  options.quant = "mxfp4";
  options.layout = "shuffle";
  Engine engine(options);
  bool found = false;
  for (const ParameterInfo& info : engine.named_parameters()) {
    if (info.name != "model.layers.0.mlp.gate_up_proj.weight_scale") continue;
    found = true;
    EXPECT_EQ(info.tensor.dtype(), DType::e8m0);
    EXPECT_EQ(info.tensor.shape(), (Shape{704, 4}));
    EXPECT_TRUE(info.tensor.read_only());
    EXPECT_EQ(info.transforms, (std::vector<std::string>{"quantize:mxfp4", "shuffle_16x16"}));
  }
  EXPECT_TRUE(found);
  // The interleave moves codes only: the scales' metadata says so.
  options.quant = "q8_0-w8a8";
  options.layout = "interleave4x16";
  Engine interleaved(options);
  int seen = 0;
  for (const ParameterInfo& info : interleaved.named_parameters()) {
    if (info.name == "model.layers.0.mlp.down_proj.weight") {
      ++seen;
      EXPECT_EQ(info.tensor.layout(), Layout::interleaved_4x16);
      EXPECT_EQ(info.transforms,
                (std::vector<std::string>{"quantize:q8_0-w8a8", "interleave_4x16"}));
    } else if (info.name == "model.layers.0.mlp.down_proj.weight_scale") {
      ++seen;
      EXPECT_EQ(info.tensor.layout(), Layout::strided);
      EXPECT_EQ(info.transforms, (std::vector<std::string>{"quantize:q8_0-w8a8"}));
    }
  }
  EXPECT_EQ(seen, 2);
  EngineOptions demo;
  demo.quant = "q8_0";
  EXPECT_THROW(Engine{demo}, Error);
}

}  // namespace
}  // namespace refit
