// Memory release (SGLang's release_memory_occupation, vLLM's sleep) keeps law L2: the
// pages go back to the OS but no storage moves, generation is refused until every
// checkpoint tensor is sent again, and then every parameter is bitwise a fresh load's, at
// the addresses it always had. The KV pool keeps its addresses too.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/paged_kv_cache.h"
#include "models/model.h"
#include "runtime/engine.h"

namespace refit {
namespace {

const std::string kModel = std::string(REFIT_SHARED_DIR) + "/oracle/stories260K/hf";

struct Snapshot {
  std::vector<const void*> addresses;
  std::vector<std::vector<uint8_t>> bytes;
};

Snapshot snapshot(const Engine& e) {
  Snapshot s;
  for (const ParameterInfo& p : e.named_parameters()) {
    s.addresses.push_back(p.tensor.raw_data());
    const auto* b = static_cast<const uint8_t*>(p.tensor.raw_data());
    s.bytes.emplace_back(b, b + p.tensor.nbytes());
  }
  return s;
}

TEST(ServeMemoryRelease, WeightsComeBackBitwiseAtTheSameAddresses) {
  EngineOptions o;
  o.model_path = kModel;
  Engine engine(o);
  const Snapshot before = snapshot(engine);
  const uint64_t version = engine.weight_version();

  engine.release_weights();
  EXPECT_TRUE(engine.weights_released());
  EXPECT_GT(engine.weight_version(), version);  // nothing cached on the old weights is current
  const Snapshot released = snapshot(engine);
  EXPECT_EQ(released.addresses, before.addresses);
  bool all_zero = true;
  for (const auto& b : released.bytes)
    for (uint8_t x : b) all_zero = all_zero && x == 0;
  EXPECT_TRUE(all_zero) << "released weights must read as zeros, not stale values";
  const size_t missing = engine.released_weights().size();
  EXPECT_GT(missing, 0u);

  // A partial update leaves the rest released.
  const std::string one = engine.released_weights().front();
  engine.update_weights_from_disk(kModel, {one});
  EXPECT_TRUE(engine.weights_released());
  EXPECT_EQ(engine.released_weights().size(), missing - 1);

  engine.update_weights_from_disk(kModel);
  EXPECT_FALSE(engine.weights_released());
  const Snapshot after = snapshot(engine);
  EXPECT_EQ(after.addresses, before.addresses);
  EXPECT_EQ(after.bytes, before.bytes);
}

TEST(ServeMemoryRelease, KvPoolKeepsItsAddressesAndRefusesWhileInUse) {
  EngineOptions o;
  o.model_path = kModel;
  Engine engine(o);
  PagedKvCache cache = make_paged_cache(engine.model(), 8, 16);
  const void* keys = cache.keys(0).raw_data();
  std::vector<int32_t> table;
  ASSERT_TRUE(cache.reserve(table, 20));
  EXPECT_THROW(cache.discard_memory(), Error);  // blocks in use
  cache.release(table);
  EXPECT_GT(cache.discard_memory(), 0u);
  EXPECT_EQ(cache.keys(0).raw_data(), keys);
  EXPECT_EQ(cache.free_blocks(), cache.n_blocks());
}

}  // namespace
}  // namespace refit
