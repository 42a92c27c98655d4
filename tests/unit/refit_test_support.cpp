#include "refit_test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "dist/local_group.h"
#include "models/model_loader.h"
#include "models/quantize_model.h"

namespace refit::testing {

TensorMap base_weights(const std::string& path, const Model& model) {
  auto ck = Checkpoint::open(path);
  CheckpointWeights weights(*ck, model.config());
  TensorMap out;
  for (const std::string& name : model.parameters().checkpoint_names())
    out[name] = weights.find(name).to(DType::f32).clone();
  return out;
}

TensorMap perturbed(const TensorMap& base, uint32_t seed, DType dtype) {
  TensorMap out;
  for (const auto& [name, t] : base) {
    std::vector<float> v = t.to_floats();
    uint64_t state = seed * 0x9E3779B97F4A7C15ull ^ std::hash<std::string>{}(name);
    for (float& x : v) {  // a cheap LCG: only distinctness and determinism matter here
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>(state >> 40) * 0x1.0p-24f - 0.5f;  // [-0.5, 0.5)
      x = x * (1.0f + 0.2f * u) + 0.01f * u;
    }
    out[name] = Tensor::from_floats(t.shape(), v).to(dtype);
  }
  return out;
}

std::unique_ptr<Model> fresh_model(const ModelConfig& config, const TensorParallel& tp,
                                   const TensorMap& weights, const std::string& quant,
                                   const std::string& layout) {
  auto m = create_model(config, DType::f32, tp);
  if (!quant.empty()) quantize_linear_weights(*m, parse_quant_scheme(quant));
  for (const std::string& name : m->parameters().checkpoint_names()) {
    CheckpointTarget t = m->parameters().target(name);
    t.parameter->load(*t.sub_shard, weights.at(name));
  }
  apply_weight_layout(*m, layout);
  return m;
}

std::map<std::string, const void*> addresses(const Model& m) {
  std::map<std::string, const void*> a;
  for (const auto& p : m.parameters().all()) {
    a[p->name()] = p->data().storage()->data();
    if (p->quantized()) a[p->name() + "_scale"] = p->scale().storage()->data();
  }
  return a;
}

void expect_same_bytes(const Model& got, const Model& want, const std::string& what,
                       bool quantized_only) {
  for (const auto& p : got.parameters().all()) {
    if (quantized_only && !p->quantized()) continue;
    const Parameter& q = want.parameters().get(p->name());
    ASSERT_EQ(p->quantization(), q.quantization()) << what << " " << p->name();
    ASSERT_EQ(p->data().shape(), q.data().shape()) << what << " " << p->name();
    ASSERT_EQ(p->data().layout(), q.data().layout()) << what << " " << p->name();
    ASSERT_EQ(p->data().nbytes(), q.data().nbytes()) << what << " " << p->name();
    EXPECT_EQ(std::memcmp(p->data().raw_data(), q.data().raw_data(), p->data().nbytes()), 0)
        << what << ": stored bytes of " << p->name() << " differ";
    if (p->quantized()) {
      ASSERT_EQ(p->scale().layout(), q.scale().layout()) << what << " " << p->name();
      EXPECT_EQ(std::memcmp(p->scale().raw_data(), q.scale().raw_data(), p->scale().nbytes()), 0)
          << what << ": scales of " << p->name() << " differ";
    }
  }
}

std::vector<float> logits_of(const Model& m) {
  const std::vector<int32_t> tokens = {1, 9038, 2501, 263, 931, 17, 4, 200};
  KvCache cache = m.make_cache(static_cast<int64_t>(tokens.size()));
  return m.forward(tokens, 0, cache, true).to_floats();
}

void run_ranks(int world, const std::function<void(int, std::shared_ptr<Communicator>)>& fn) {
  if (world == 1) return fn(0, single_process_communicator());
  auto group = LocalGroup::create(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { fn(r, group->communicator(r)); });
  for (auto& t : threads) t.join();
}

}  // namespace refit::testing
