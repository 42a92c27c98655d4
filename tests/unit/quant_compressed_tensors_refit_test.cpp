// Law L2 for compressed-tensors FP8 checkpoints, per tensor and per channel, TP 1 and 2: after
// loading one, a refit leaves every stored byte (codes and scales) and the logits equal to a
// fresh engine loaded from a checkpoint holding the new weights, at the same addresses:
//  * from the trainer's bf16 tensors, re-quantized in the checkpoint's own scheme (the fresh
//    engine loads those weights quantized as a compressed-tensors checkpoint by min-max,
//    what llm-compressor's default observer computes);
//  * from disk, a compressed-tensors checkpoint: its codes and scales as they are, also when
//    no re-quantization could give them back (bf16 scales with headroom), in full or one
//    fused sub-shard at a time.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "compressed_tensors_test_util.h"
#include "refit_test_support.h"
#include "runtime/engine.h"

namespace refit {
namespace {

using namespace refit::ct_test;
using refit::testing::addresses;
using refit::testing::expect_same_bytes;
using refit::testing::run_ranks;

const std::vector<int32_t> kTokens = {1, 17, 200, 45, 3, 99, 128, 7};

struct RefitCase {
  std::string strategy;
  int tp;
};
void PrintTo(const RefitCase& c, std::ostream* os) { *os << c.strategy << ", TP " << c.tp; }

class CtRefit : public ::testing::TestWithParam<RefitCase> {};

std::unique_ptr<Engine> engine_on(const std::string& path, int tp,
                                  std::shared_ptr<Communicator> comm) {
  EngineOptions options;
  options.model_path = path;
  options.tp = tp;
  options.communicator = std::move(comm);
  return std::make_unique<Engine>(options);
}

TEST_P(CtRefit, refit_from_bf16_and_from_disk_equals_a_fresh_load_bitwise) {
  const RefitCase c = GetParam();
  const Weights base = source_weights();
  const Weights next = as_bf16(perturbed(base, 7));  // what the trainer holds
  Weights next_f32;
  for (const auto& [name, t] : next) next_f32[name] = t.to(DType::f32);
  Dir first, second;
  CtOptions o;
  o.strategy = c.strategy;
  o.headroom_bf16_scales = true;  // as a calibrated checkpoint: no re-quantization gives it back
  write_ct_checkpoint(first.str(), base, o);
  o.headroom_bf16_scales = false;  // min-max: the scheme a refit from floats computes
  write_ct_checkpoint(second.str(), next_f32, o);
  run_ranks(c.tp, [&](int, std::shared_ptr<Communicator> comm) {
    auto engine = engine_on(first.str(), c.tp, comm);
    const auto before = addresses(engine->model());
    // 1. The trainer's bf16 tensors, every name.
    std::vector<std::pair<std::string, Tensor>> tensors(next.begin(), next.end());
    engine->update_weights_from_tensors(tensors);
    auto fresh_second = engine_on(second.str(), c.tp, comm);
    // At TP 2 too: a rank's slice (rows of q/k/v and gate/up, columns of o and down) takes the
    // whole tensor's or row's scale, as the checkpoint stores it.
    expect_same_bytes(engine->model(), fresh_second->model(), "bf16 refit");
    EXPECT_EQ(engine->logits(kTokens).to_floats(), fresh_second->logits(kTokens).to_floats());
    // 2. Back to the first checkpoint from disk: its codes and scales, exactly.
    engine->update_weights_from_disk(first.str());
    auto fresh_first = engine_on(first.str(), c.tp, comm);
    expect_same_bytes(engine->model(), fresh_first->model(), "reload of the first checkpoint");
    EXPECT_EQ(engine->logits(kTokens).to_floats(), fresh_first->logits(kTokens).to_floats());
    // 3. The second from disk, q/k/v one sub-shard at a time, the rest at once.
    for (const char* proj : {"q_proj", "k_proj", "v_proj"})
      engine->update_weights_from_disk(second.str(),
                                       {fmt::format("model.layers.0.self_attn.{}.weight", proj)});
    engine->update_weights_from_disk(second.str());
    expect_same_bytes(engine->model(), fresh_second->model(), "refit from the second on disk");
    EXPECT_EQ(engine->logits(kTokens).to_floats(), fresh_second->logits(kTokens).to_floats());
    EXPECT_EQ(addresses(engine->model()), before);
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, CtRefit,
                         ::testing::Values(RefitCase{"tensor", 1}, RefitCase{"channel", 1},
                                           RefitCase{"tensor", 2}, RefitCase{"channel", 2}));

// A partial reload of q_proj changes only q's rows (codes and scales) of the fused qkv.
TEST(CtRefitPartial, reloading_q_proj_leaves_k_and_v_untouched) {
  Dir first, second;
  CtOptions o;
  write_ct_checkpoint(first.str(), source_weights(), o);
  write_ct_checkpoint(second.str(), perturbed(source_weights(), 3), o);
  EngineOptions options;
  options.model_path = first.str();
  Engine engine(options);
  const Parameter& qkv =
      engine.model().parameters().get("model.layers.0.self_attn.qkv_proj.weight");
  const int64_t k = qkv.local_shape()[1], q_rows = qkv.sub_shards()[0].local_rows;
  const auto bytes = [&] {
    const auto* b = static_cast<const uint8_t*>(qkv.data().raw_data());
    const auto* s = static_cast<const uint8_t*>(qkv.scale().raw_data());
    return std::pair{std::vector<uint8_t>(b, b + qkv.data().nbytes()),
                     std::vector<uint8_t>(s, s + qkv.scale().nbytes())};
  };
  const auto [codes0, scales0] = bytes();
  engine.update_weights_from_disk(second.str(), {"model.layers.0.self_attn.q_proj.weight"});
  const auto [codes1, scales1] = bytes();
  const size_t q_codes = static_cast<size_t>(q_rows * k),
               q_scales = static_cast<size_t>(q_rows) * 4;
  EXPECT_NE(std::vector<uint8_t>(codes1.begin(), codes1.begin() + q_codes),
            std::vector<uint8_t>(codes0.begin(), codes0.begin() + q_codes));
  EXPECT_EQ(std::vector<uint8_t>(codes1.begin() + q_codes, codes1.end()),
            std::vector<uint8_t>(codes0.begin() + q_codes, codes0.end()));
  EXPECT_EQ(std::vector<uint8_t>(scales1.begin() + q_scales, scales1.end()),
            std::vector<uint8_t>(scales0.begin() + q_scales, scales0.end()));
}

}  // namespace
}  // namespace refit
