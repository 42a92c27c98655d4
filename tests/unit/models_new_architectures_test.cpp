// Gemma 3 and Phi-3 against llama.cpp (tests/data/llamacpp: micro GGUFs written with
// gguf-py, llama.cpp's logits; tests/data/llamacpp/README.md says how they were made and
// why the tolerances are what they are), the Hugging Face folder of the same weights
// against the GGUF, and a refit of each architecture against a fresh load.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/checkpoint.h"
#include "models/model_loader.h"
#include "models/quantize_model.h"
#include "reference_files.h"
#include "refit_test_support.h"
#include "runtime/generator.h"
#include "weights/weight_update.h"

namespace refit {
namespace {

const std::string kData = "tests/data/llamacpp";

using testing::ids_of;
using testing::read_floats;
using testing::read_key_values;

std::vector<float> teacher_forced(const Model& model, const std::vector<int32_t>& sequence) {
  KvCache cache = model.make_cache(static_cast<int64_t>(sequence.size()));
  return model.forward(sequence, 0, cache, /*all_logits=*/true).to_floats();
}

std::unique_ptr<Model> load(const std::string& path, int64_t context) {
  LoadOptions o;
  o.max_model_len = context;
  return load_model(path, o);
}

struct ReferenceRun {
  std::string name;  // "p12_ctx256"
  int64_t context;   // llama.cpp's n_ctx
};

struct MicroCase {
  std::string folder;
  std::vector<ReferenceRun> runs;
  // llama.cpp computes GELU through an fp16 table (ggml-cpu vec.h); refit's is exact, so
  // Gemma 3 differs by up to ~0.02 where llama.cpp differs from itself by 0.013 (README).
  double max_abs, mean_abs;
};
void PrintTo(const MicroCase& c, std::ostream* os) { *os << c.folder; }

class MicroLlamaCpp : public ::testing::TestWithParam<MicroCase> {};

TEST_P(MicroLlamaCpp, GreedyIdsAndLogitsMatchLlamaCpp) {
  const MicroCase& c = GetParam();
  const std::string dir = kData + "/" + c.folder;
  for (const ReferenceRun& run : c.runs) {
    SCOPED_TRACE(run.name);
    auto model = load(dir + "/" + c.folder + ".gguf", run.context);
    auto ref = read_key_values(dir + "/" + run.name + ".tokens.txt");
    const std::vector<int32_t> prompt = ids_of(ref["prompt_ids"]),
                               generated = ids_of(ref["generated_ids"]);
    ASSERT_FALSE(generated.empty());
    GenerateRequest req;
    req.prompt = prompt;
    req.max_tokens = static_cast<int64_t>(generated.size());
    EXPECT_EQ(generate(*model, req).tokens, generated);

    std::vector<int32_t> sequence = prompt;
    sequence.insert(sequence.end(), generated.begin(), generated.end());
    const std::vector<float> want = read_floats(dir + "/" + run.name + ".logits.f32");
    const std::vector<float> got = teacher_forced(*model, sequence);
    ASSERT_EQ(got.size(), want.size());
    double max_abs = 0, sum = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
      max_abs = std::max(max_abs, d);
      sum += d;
    }
    EXPECT_LT(max_abs, c.max_abs);
    EXPECT_LT(sum / static_cast<double>(got.size()), c.mean_abs);
    RecordProperty(run.name + "_max_abs", std::to_string(max_abs));
  }
}

// The Hugging Face folder holds the same model under transformers' names and conventions
// (Gemma's norms as w where the GGUF has 1 + w, Phi-3's fused tensors): same logits.
TEST_P(MicroLlamaCpp, HuggingFaceFolderMatchesTheGguf) {
  const MicroCase& c = GetParam();
  const std::string dir = kData + "/" + c.folder;
  const ReferenceRun& run = c.runs.back();
  auto gguf = load(dir + "/" + c.folder + ".gguf", run.context);
  auto hf = load(dir + "/hf", run.context);
  EXPECT_EQ(hf->config().layers.size(), gguf->config().layers.size());
  for (int64_t l = 0; l < gguf->config().n_layers; ++l) {
    const LayerConfig a = hf->config().layer(l), b = gguf->config().layer(l);
    EXPECT_EQ(a.window, b.window) << "layer " << l;
    EXPECT_EQ(a.rope.theta, b.rope.theta) << "layer " << l;
    EXPECT_EQ(a.rope.dim, b.rope.dim) << "layer " << l;
    EXPECT_EQ(static_cast<int>(a.rope.scaling.kind), static_cast<int>(b.rope.scaling.kind))
        << "layer " << l;
    EXPECT_EQ(a.rope.scaling.factor, b.rope.scaling.factor) << "layer " << l;
    EXPECT_EQ(a.rope.scaling.short_factors, b.rope.scaling.short_factors) << "layer " << l;
    EXPECT_EQ(a.rope.scaling.long_factors, b.rope.scaling.long_factors) << "layer " << l;
    EXPECT_NEAR(a.rope.scaling.attention_factor, b.rope.scaling.attention_factor, 1e-6)
        << "layer " << l;
    EXPECT_EQ(static_cast<int>(a.norms), static_cast<int>(b.norms)) << "layer " << l;
    EXPECT_EQ(a.qk_norm, b.qk_norm) << "layer " << l;
    EXPECT_EQ(static_cast<int>(a.activation), static_cast<int>(b.activation)) << "layer " << l;
  }
  auto ref = read_key_values(dir + "/" + run.name + ".tokens.txt");
  std::vector<int32_t> sequence = ids_of(ref["prompt_ids"]);
  const std::vector<int32_t> generated = ids_of(ref["generated_ids"]);
  sequence.insert(sequence.end(), generated.begin(), generated.end());
  const std::vector<float> a = teacher_forced(*gguf, sequence), b = teacher_forced(*hf, sequence);
  ASSERT_EQ(a.size(), b.size());
  double max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i)
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[i]) - b[i]));
  // (1 + w) - 1 in f32 rounds Gemma's norm weights by an ulp; Phi-3's are the same bytes.
  EXPECT_LT(max_abs, c.folder.rfind("phi3", 0) == 0 ? 1e-30 : 1e-3);
}

// Law L2: the weights a trainer sends, written into the parameters in place, compute
// exactly what a fresh load of those weights computes.
TEST_P(MicroLlamaCpp, RefitIsBitwiseAFreshLoad) {
  const MicroCase& c = GetParam();
  const std::string hf_dir = kData + "/" + c.folder + "/hf";
  auto model = load(hf_dir, 0);
  const auto before = testing::addresses(*model);
  const testing::TensorMap sent =
      testing::perturbed(testing::base_weights(hf_dir, *model), 7, DType::f32);
  WeightUpdate update(model->parameters(), {});
  for (const auto& [name, t] : sent) update.update(name, t);
  update.apply();
  auto fresh = testing::fresh_model(model->config(), {}, sent, "", "");
  testing::expect_same_bytes(*model, *fresh, "refit vs fresh");
  EXPECT_EQ(testing::addresses(*model), before);
  std::vector<int32_t> sequence;  // longer than Gemma's window of 8
  for (int32_t i = 0; i < 24; ++i) sequence.push_back((i * 37 + 5) % 300 + 4);
  const std::vector<float> got = teacher_forced(*model, sequence);
  EXPECT_EQ(got, teacher_forced(*fresh, sequence));
  EXPECT_NE(got, teacher_forced(*load(hf_dir, 0), sequence));  // the update changed the model
}

// The server's paged cache (batched, chunked, blocks of 4: windows cross block edges)
// gives bitwise the logits of the contiguous single-sequence path.
TEST_P(MicroLlamaCpp, PagedBatchedForwardIsBitwiseTheContiguousOne) {
  const MicroCase& c = GetParam();
  auto model = load(kData + "/" + c.folder + "/" + c.folder + ".gguf", c.runs.back().context);
  std::vector<int32_t> sequence;
  for (int32_t i = 0; i < 29; ++i) sequence.push_back((i * 41 + 7) % 300 + 4);
  const std::vector<float> want = teacher_forced(*model, sequence);
  PagedKvCache cache = make_paged_cache(*model, 16, 4);
  std::vector<int32_t> table;
  ASSERT_TRUE(cache.reserve(table, static_cast<int64_t>(sequence.size())));
  std::vector<float> got;
  for (int64_t start = 0; start < static_cast<int64_t>(sequence.size()); start += 5) {
    BatchSequence s;
    s.tokens = std::span<const int32_t>(sequence).subspan(
        static_cast<size_t>(start), std::min<size_t>(5, sequence.size() - start));
    s.start_pos = start;
    s.block_table = table;
    s.logits = LogitsWanted::all;
    const std::vector<float> rows =
        batched_forward(*model, std::span<const BatchSequence>(&s, 1), cache).logits.to_floats();
    got.insert(got.end(), rows.begin(), rows.end());
  }
  EXPECT_EQ(got, want);
}

// Quantization picks the blocks' matmul weights from the architecture's table (fused in
// the checkpoint or not): four per layer, and the model still computes nearly the same.
TEST_P(MicroLlamaCpp, Q8_0QuantizesEveryBlockMatmulFromTheTable) {
  const MicroCase& c = GetParam();
  const std::string gguf = kData + "/" + c.folder + "/" + c.folder + ".gguf";
  auto ck = Checkpoint::open(gguf);
  ModelConfig config = read_model_config(*ck);
  auto model = create_model(config, config.weight_dtype);
  const QuantizedModelSummary q = quantize_linear_weights(*model, parse_quant_scheme("q8_0"));
  EXPECT_EQ(q.quantized.size(), static_cast<size_t>(4 * config.n_layers)) << q.str();
  EXPECT_TRUE(q.kept.empty()) << q.str();
  load_weights(*model, *ck);
  std::vector<int32_t> sequence;
  for (int32_t i = 0; i < 12; ++i) sequence.push_back((i * 29 + 3) % 300 + 4);
  const std::vector<float> a = teacher_forced(*model, sequence),
                           b = teacher_forced(*load_model(gguf), sequence);
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::fabs(static_cast<double>(a[i]) - b[i]);
  EXPECT_LT(sum / static_cast<double>(a.size()), 0.5);  // llama-q8_0's tolerance in the oracle test
}

// Tensor parallelism over the table's sharding (heads split, windows and rope per layer
// kept on every rank): Gemma 3 on two ranks computes what it does on one. (Phi-3's fused
// checkpoint tensors are split across ranks in models_phi3_tensor_parallel_test.cpp.)
TEST(Gemma3TensorParallel, TwoRanksMatchOne) {
  const std::string gguf = kData + "/gemma3-micro/gemma3-micro.gguf";
  std::vector<int32_t> sequence;
  for (int32_t i = 0; i < 20; ++i) sequence.push_back((i * 43 + 9) % 300 + 4);
  const std::vector<float> want = teacher_forced(*load_model(gguf), sequence);
  std::vector<std::vector<float>> got(2);
  testing::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    LoadOptions o;
    o.tensor_parallel.communicator = comm;
    auto model = load_model(gguf, o);
    EXPECT_EQ(model->local_kv_heads(), 1);
    got[static_cast<size_t>(rank)] = teacher_forced(*model, sequence);
  });
  for (const auto& g : got) {
    ASSERT_EQ(g.size(), want.size());
    double max_abs = 0;
    for (size_t i = 0; i < g.size(); ++i)
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(g[i]) - want[i]));
    EXPECT_LT(max_abs, 1e-3);
  }
  EXPECT_EQ(got[0], got[1]);
}

// Config fields the architecture cannot honour are refused by name, not ignored.
TEST(NewArchitectureConfigs, UnsupportedFieldsAreRefusedByName) {
  std::ifstream in(kData + "/gemma3-micro/hf/config.json");
  const nlohmann::json base = nlohmann::json::parse(in);
  auto refusal = [](const nlohmann::json& j) {
    try {
      config_from_hf_json(j.dump(), "config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal(base), "");
  nlohmann::json j = base;
  j["attn_logit_softcapping"] = 50.0;
  EXPECT_NE(refusal(j).find("'attn_logit_softcapping' = 50.0 (soft-capping of attention logits) "
                            "is not supported for gemma3"),
            std::string::npos)
      << refusal(j);
  j = base;
  j["hidden_activation"] = "relu";
  EXPECT_NE(refusal(j).find("hidden_activation 'relu'"), std::string::npos) << refusal(j);
  j = base;
  j["layer_types"].erase(0);
  EXPECT_NE(refusal(j).find("layer_types has 6 entries for 7 layers"), std::string::npos)
      << refusal(j);
  j = base;
  j["rope_scaling"] = {{"rope_type", "proportional"}, {"factor", 2.0}};
  EXPECT_NE(refusal(j).find("rope_scaling type 'proportional' is not supported"), std::string::npos)
      << refusal(j);
  std::ifstream phi(kData + "/phi3-micro/hf/config.json");
  j = nlohmann::json::parse(phi);
  j["rope_scaling"]["long_factor"].erase(0);
  EXPECT_NE(refusal(j).find("longrope has 8 short and 7 long factors"), std::string::npos)
      << refusal(j);
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, MicroLlamaCpp,
    ::testing::Values(MicroCase{"gemma3-micro",
                                {{"p05_ctx128", 128}, {"p12_ctx128", 128}, {"p20_ctx128", 128}},
                                0.05,
                                0.005},
                      MicroCase{"gemma3-linear-micro",
                                {{"p05_ctx128", 128}, {"p12_ctx128", 128}, {"p20_ctx128", 128}},
                                0.05,
                                0.005},
                      MicroCase{"phi3-micro",
                                {{"p05_ctx128", 128}, {"p12_ctx128", 128}, {"p20_ctx128", 128}},
                                1e-3,
                                1e-4},
                      MicroCase{"phi3-orig256-micro",
                                {{"p05_ctx256", 256},
                                 {"p12_ctx256", 256},
                                 {"p20_ctx256", 256},
                                 {"p05_ctx512", 512},
                                 {"p12_ctx512", 512},
                                 {"p20_ctx512", 512}},
                                1e-3,
                                1e-4}),
    [](const auto& info) {
      std::string n = info.param.folder;
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace refit
