// Phi-3 under tensor parallelism. Its checkpoint stores q/k/v fused as one qkv_proj tensor
// and gate/up as one gate_up_proj, so at --tp 2 each rank takes rows of one checkpoint
// tensor from several places (its q heads, its k heads, its v heads): one sub-shard of
// several ranges. These tests hold every path that reads or writes such a sub-shard to
// the same standard as an unfused one: the forward pass, the initial load, refit through
// WeightUpdate and through the rank group (bitwise a fresh load, at the same addresses,
// quantized and in kernel layouts too), refusal of a bad tensor, and readback of the whole
// checkpoint tensor from the ranks' pieces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>

#include "formats/checkpoint.h"
#include "models/model_loader.h"
#include "parallel/rank_group.h"
#include "parallel/weight_readback.h"
#include "refit_test_support.h"
#include "runtime/engine.h"
#include "weights/weight_update.h"

namespace refit {
namespace {

const std::string kFolder = "tests/data/llamacpp/phi3-micro";
const std::string kGguf = kFolder + "/phi3-micro.gguf";
const std::string kHf = kFolder + "/hf";
const std::string kQkv = "model.layers.0.self_attn.qkv_proj.weight";
const std::string kGateUp = "model.layers.1.mlp.gate_up_proj.weight";

// The micro model: 4 heads of 16 (q: 64 rows), 2 KV heads (k, v: 32 rows each), ffn 96.
constexpr int64_t kQ = 64, kKv = 32, kFfn = 96;

std::vector<int32_t> sequence() {
  std::vector<int32_t> s;
  for (int32_t i = 0; i < 20; ++i) s.push_back((i * 37 + 5) % 300 + 4);
  return s;
}

std::vector<float> teacher_forced(const Model& model) {
  const std::vector<int32_t> s = sequence();
  KvCache cache = model.make_cache(static_cast<int64_t>(s.size()));
  return model.forward(s, 0, cache, /*all_logits=*/true).to_floats();
}

LoadOptions on(std::shared_ptr<Communicator> comm) {
  LoadOptions o;
  o.tensor_parallel.communicator = std::move(comm);
  return o;
}

TensorParallel tp_of(std::shared_ptr<Communicator> comm) {
  TensorParallel tp;
  tp.communicator = std::move(comm);
  return tp;
}

// The checkpoint's tensors (f32) and config, read once at TP=1.
struct Reference {
  ModelConfig config;
  testing::TensorMap weights;
};

const Reference& reference() {
  static const Reference r = [] {
    auto model = load_model(kGguf);
    return Reference{model->config(), testing::base_weights(kGguf, *model)};
  }();
  return r;
}

// Rank r of 2's rows of each fused tensor, as (checkpoint row, count) in local order.
std::vector<SliceRange> qkv_rows(int64_t r) {
  return {{r * kQ / 2, kQ / 2}, {kQ + r * kKv / 2, kKv / 2}, {kQ + kKv + r * kKv / 2, kKv / 2}};
}
std::vector<SliceRange> gate_up_rows(int64_t r) {
  return {{r * kFfn / 2, kFfn / 2}, {kFfn + r * kFfn / 2, kFfn / 2}};
}

Tensor rows_of(const Tensor& full, const std::vector<SliceRange>& ranges) {
  int64_t n = 0;
  for (const SliceRange& r : ranges) n += r.length;
  Shape shape = full.shape();
  shape[0] = n;
  Tensor out = Tensor::empty(shape, full.dtype());
  int64_t row = 0;
  for (const SliceRange& r : ranges) {
    out.narrow(0, row, r.length).copy_from(full.narrow(0, r.start, r.length));
    row += r.length;
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

TEST(Phi3TensorParallel, TwoRanksMatchOne) {
  for (const std::string& path : {kGguf, kHf}) {
    const std::vector<float> want = teacher_forced(*load_model(path));
    std::vector<std::vector<float>> got(2);
    testing::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
      auto model = load_model(path, on(comm));
      EXPECT_EQ(model->local_kv_heads(), 1);
      got[static_cast<size_t>(rank)] = teacher_forced(*model);
    });
    for (const auto& g : got) {
      ASSERT_EQ(g.size(), want.size()) << path;
      EXPECT_LT(max_abs_diff(g, want), 1e-4) << path;
    }
    EXPECT_EQ(got[0], got[1]) << path;
  }
}

TEST(Phi3TensorParallel, EachRankHoldsItsRowsOfTheFusedTensor) {
  const Reference& ref = reference();
  testing::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto model = load_model(kGguf, on(comm));
    const ParameterSet& params = model->parameters();
    // One entry per checkpoint tensor, whatever the sharding: loaders, refit and export
    // look each name up once.
    const std::vector<std::string> names = params.checkpoint_names();
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
    EXPECT_EQ(names.size(), ref.weights.size());
    for (const auto& [name, ranges] :
         {std::pair{kQkv, qkv_rows(rank)}, std::pair{kGateUp, gate_up_rows(rank)}}) {
      const CheckpointTarget t = params.target(name);
      ASSERT_NE(t.parameter, nullptr) << name;
      const Parameter& p = *t.parameter;
      ASSERT_EQ(p.sub_shards().size(), 1u) << name;
      const SubShard& s = *t.sub_shard;
      EXPECT_EQ(s.split_dim, 0) << name;
      EXPECT_EQ(s.slices(), ranges) << name;
      EXPECT_EQ(s.local_row_offset, 0) << name;
      EXPECT_EQ(s.local_rows, p.local_shape()[0]) << name;
      EXPECT_EQ(s.checkpoint_shape, ref.weights.at(name).shape()) << name;
      EXPECT_EQ(p.logical_shape(), ref.weights.at(name).shape()) << name;
      const Tensor want = rows_of(ref.weights.at(name).to(p.dtype()), ranges);
      ASSERT_EQ(p.data().shape(), want.shape()) << name;
      EXPECT_EQ(std::memcmp(p.data().raw_data(), want.raw_data(), want.nbytes()), 0)
          << name << " rank " << rank;
      // The sharding names every range.
      const std::string sharding = p.sharding_str();
      EXPECT_NE(sharding.find(fmt::format("rank {} of 2", rank)), std::string::npos) << sharding;
      EXPECT_NE(sharding.find(s.slices_str()), std::string::npos) << sharding;
    }
    EXPECT_NE(
        params.target(kQkv).parameter->sharding_str().find(
            rank == 0 ? "[dim 0: 0..32, 64..80, 96..112]" : "[dim 0: 32..64, 80..96, 112..128]"),
        std::string::npos)
        << params.target(kQkv).parameter->sharding_str();
  });
  // At TP=1 the three sources join into the whole tensor, as before.
  auto one = load_model(kGguf);
  const CheckpointTarget t = one->parameters().target(kQkv);
  EXPECT_EQ(t.sub_shard->split_dim, -1);
  EXPECT_TRUE(t.sub_shard->more_slices.empty());
  EXPECT_EQ(t.parameter->sharding_str(), "replicated");
}

// Refit under TP=2 (every tensor, then only the fused ones) is bitwise a fresh TP=2 load
// of what was sent, at the same addresses: float, transposed and tile-shuffled layouts, and
// quantized (a scale per row, so a sub-shard of several ranges never mixes tensors).
TEST(Phi3TensorParallel, RefitIsBitwiseAFreshLoadAtTheSameAddresses) {
  const Reference& ref = reference();
  const testing::TensorMap sent = testing::perturbed(ref.weights, 7, DType::bf16);
  testing::TensorMap partial = ref.weights;
  partial[kQkv] = sent.at(kQkv);
  partial[kGateUp] = sent.at(kGateUp);
  for (const auto& [quant, layout] :
       std::vector<std::pair<std::string, std::string>>{{"", "plain"},
                                                        {"", "transpose"},
                                                        {"", "shuffle16x16"},
                                                        {"q8_0", "plain"},
                                                        {"q8_0-w8a8", "interleave4x16"},
                                                        {"fp8", "plain"},
                                                        {"q8_0", "shuffle16x16"}}) {
    const std::string what = quant + "/" + layout;
    testing::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
      const TensorParallel tp = tp_of(comm);
      auto model = testing::fresh_model(ref.config, tp, ref.weights, quant, layout);
      const auto before = testing::addresses(*model);
      const Parameter& qkv = *model->parameters().target(kQkv).parameter;
      if (layout != "plain") {
        EXPECT_FALSE(qkv.transforms().empty()) << what;
      }
      EXPECT_EQ(qkv.quantized(), !quant.empty()) << what;

      // Only the fused tensors.
      {
        WeightUpdate u(model->parameters(), {});
        u.update(kQkv, sent.at(kQkv));
        u.update(kGateUp, sent.at(kGateUp));
        u.apply();
      }
      testing::expect_same_bytes(*model,
                                 *testing::fresh_model(ref.config, tp, partial, quant, layout),
                                 what + " partial rank " + std::to_string(rank));
      // Every tensor.
      {
        WeightUpdate u(model->parameters(), {.check_finite = true});
        for (const auto& [name, t] : sent) u.update(name, t);
        u.apply();
      }
      testing::expect_same_bytes(*model, *testing::fresh_model(ref.config, tp, sent, quant, layout),
                                 what + " full rank " + std::to_string(rank));
      EXPECT_EQ(testing::addresses(*model), before) << what;
    });
  }
}

TEST(Phi3TensorParallel, WrongShapedFusedTensorIsRefusedAndNothingChanges) {
  const Reference& ref = reference();
  const testing::TensorMap sent = testing::perturbed(ref.weights, 11, DType::f32);
  testing::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    const TensorParallel tp = tp_of(comm);
    auto model = testing::fresh_model(ref.config, tp, ref.weights, "", "plain");
    WeightUpdate u(model->parameters(), {});
    u.update("model.layers.0.self_attn.o_proj.weight",
             sent.at("model.layers.0.self_attn.o_proj.weight"));
    const Tensor bad =
        Tensor::zeros({kQ + kKv, ref.config.dim}, DType::f32);  // no v rows: not [q + 2 kv, dim]
    try {
      u.update(kQkv, bad);
      ADD_FAILURE() << "a wrong-shaped qkv_proj was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(kQkv), std::string::npos) << m;
      EXPECT_NE(m.find("expected shape [128, 64]"), std::string::npos) << m;
    }
    // check_finite scans each of this rank's ranges (as for an unfused tensor, a rank scans
    // the rows it takes; the rank group's agreement refuses the update on every rank).
    WeightUpdate finite(model->parameters(), {.check_finite = true});
    Tensor nan = sent.at(kQkv).clone();
    nan.data<float>()[(rank == 0 ? kQ / 2 : 0) * ref.config.dim] = NAN;
    EXPECT_NO_THROW(finite.update(kGateUp, sent.at(kGateUp)));
    bool refused = false;
    try {
      finite.update(kQkv, nan);
    } catch (const Error& e) {
      refused = std::string(e.what()).find(kQkv) != std::string::npos;
    }
    EXPECT_FALSE(refused) << "rank " << rank << " refused a NaN in the other rank's q rows";
    nan.data<float>()[(kQ + kKv + rank * kKv / 2) * ref.config.dim + 5] =
        NAN;  // in this rank's v rows
    EXPECT_THROW(finite.update(kQkv, nan), Error);
    EXPECT_TRUE(u.failed());
    EXPECT_THROW(u.apply(), Error);
    EXPECT_TRUE(finite.failed());
    EXPECT_THROW(finite.apply(), Error);
    testing::expect_same_bytes(*model,
                               *testing::fresh_model(ref.config, tp, ref.weights, "", "plain"),
                               "after refusals, rank " + std::to_string(rank));
  });
}

// /get_weights_by_name's path: every rank's piece of the fused tensor, put together, is the
// checkpoint tensor bitwise (whole, and cut to leading rows that end inside a range).
TEST(Phi3TensorParallel, ReadbackReassemblesTheFusedTensor) {
  const Reference& ref = reference();
  for (const std::string& quant : {std::string(), std::string("q8_0")}) {
    for (const std::string& name : {kQkv, kGateUp}) {
      const Tensor& full = ref.weights.at(name);
      const int64_t cols = full.size(1);
      Tensor want = full;
      if (!quant.empty()) {  // decoded values: a scale per row, so TP=1 decodes the same rows alike
        EngineOptions o;
        o.model_path = kGguf;
        o.quant = quant;
        Engine one(o);
        want = assemble_weight({local_weight_piece(one, name, full.numel())});
      }
      for (int64_t rows : {full.size(0), int64_t{2}, kQ + 6, kQ + kKv + 3}) {
        std::vector<WeightPiece> pieces(2);
        testing::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
          EngineOptions o;
          o.model_path = kGguf;
          o.tp = 2;
          o.quant = quant;
          o.communicator = comm;
          Engine engine(o);
          pieces[static_cast<size_t>(rank)] = local_weight_piece(engine, name, rows * cols);
        });
        for (const WeightPiece& p : pieces) {
          ASSERT_EQ(p.status, 200) << p.error;
          EXPECT_EQ(p.full_shape, full.shape());
        }
        const Tensor got = assemble_weight(pieces);
        ASSERT_EQ(got.shape(), (Shape{rows, cols})) << name << " " << rows;
        EXPECT_EQ(got.to_floats(), want.narrow(0, 0, rows).contiguous().to_floats())
            << quant << " " << name << " leading " << rows << " rows";
      }
    }
  }
}

// The tensor-parallel server's path (rank group commands between threads as ranks):
// read_weight gathers the fused tensor over the wire, update_from_tensors refits every
// rank bitwise to a fresh load, and a wrong-shaped fused tensor changes no rank.
TEST(Phi3TensorParallel, RankGroupReadsBackAndRefitsTheFusedTensor) {
  const Reference& ref = reference();
  const testing::TensorMap sent = testing::perturbed(ref.weights, 3, DType::f32);
  std::vector<std::pair<std::string, Tensor>> update(sent.begin(), sent.end());
  std::vector<WeightPiece> pieces;
  std::string refusal;
  testing::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    EngineOptions o;
    o.model_path = kGguf;
    o.tp = 2;
    o.communicator = comm;
    Engine engine(o);
    const auto before = testing::addresses(engine.model());
    {
      RankGroup group(engine, comm);
      if (rank == 0) {
        pieces = group.read_weight(kQkv, 1 << 30);
        try {
          group.update_from_tensors({{kQkv, Tensor::zeros({kQ, ref.config.dim}, DType::f32)}});
        } catch (const Error& e) {
          refusal = e.what();
        }
        group.update_from_tensors(update);
        group.release_workers();
      } else {
        group.run_worker();
      }
    }
    testing::expect_same_bytes(engine.model(),
                               *testing::fresh_model(ref.config, tp_of(comm), sent, "", "plain"),
                               "rank group refit, rank " + std::to_string(rank));
    EXPECT_EQ(testing::addresses(engine.model()), before);
  });
  ASSERT_EQ(pieces.size(), 2u);
  for (const WeightPiece& p : pieces) ASSERT_EQ(p.status, 200) << p.error;
  const Tensor got = assemble_weight(pieces);
  const Tensor& want = ref.weights.at(kQkv);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0);
  EXPECT_NE(refusal.find(kQkv), std::string::npos) << refusal;
}

// A fused tensor's ranges are validated when the parameter is made: overlapping rows or
// rows that do not fill the sub-shard would break exact reloads and readback.
TEST(Phi3TensorParallel, SubShardRangesAreValidated) {
  SubShard s{"w", {8, 4}, 0, 0, 2, 0, 4, {{4, 2}}};
  EXPECT_NO_THROW(Parameter("p", Shape{4, 4}, DType::f32, {s}, 0, 2));
  SubShard overlap = s;
  overlap.more_slices = {{1, 2}};
  EXPECT_THROW(Parameter("p", Shape{4, 4}, DType::f32, {overlap}, 0, 2), Error);
  SubShard short_rows = s;
  short_rows.more_slices = {{4, 1}};
  EXPECT_THROW(Parameter("p", Shape{4, 4}, DType::f32, {short_rows}, 0, 2), Error);
  SubShard outside = s;
  outside.more_slices = {{7, 2}};
  EXPECT_THROW(Parameter("p", Shape{4, 4}, DType::f32, {outside}, 0, 2), Error);
  SubShard columns = s;
  columns.split_dim = 1;
  EXPECT_THROW(Parameter("p", Shape{4, 4}, DType::f32, {columns}, 0, 2), Error);
  // Loading puts each range's rows one after another.
  Parameter p("p", Shape{4, 4}, DType::f32, {s}, 0, 2);
  std::vector<float> v(32);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  p.load(s, Tensor::from_floats({8, 4}, v));
  const std::vector<float> got = p.data().to_floats();
  const std::vector<float> want = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  EXPECT_EQ(got, want);
  EXPECT_EQ(s.slices_str(), "0..2, 4..6");
}

}  // namespace
}  // namespace refit
