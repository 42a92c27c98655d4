// Reload failures of the classes other engines have shipped (vLLM RFC #48312's taxonomy;
// docs/weight-lifecycle.md maps every class to its tests) that the refit matrix does not
// single out: an aliased (tied) parameter reloaded through one of its names, a transaction
// abandoned half way and retried, a finished transaction replayed, and a transaction
// staged before another one committed.
#include <gtest/gtest.h>

#include "core/error.h"
#include "refit_test_support.h"
#include "runtime/engine.h"

namespace refit {
namespace {

using namespace refit::testing;

const std::string kQwen2 =  // tied embeddings: the LM head is the embedding table
    std::string(REFIT_SHARED_DIR) + "/oracle/llamacpp/qwen2-f32/micro-qwen2-f32-s1.gguf";
const std::string kEmbed = "model.embed_tokens.weight";

// State (aliases): in a tied model the head and the embedding are one parameter, so a
// refit of the embedding alone changes the logits' projection too, exactly as a fresh
// load of that embedding does, quantized or not. No stale copy of the head can survive.
TEST(RefitReloadClasses, tied_head_follows_an_embedding_only_refit) {
  for (const std::string quant : {"", "q8_0"}) {
    SCOPED_TRACE(quant.empty() ? "as stored" : quant);
    EngineOptions options;
    options.model_path = kQwen2;
    options.quant = quant;
    Engine engine(options);
    const Model& model = engine.model();
    ASSERT_TRUE(model.config().tied_embeddings);
    EXPECT_FALSE(model.parameters().target("lm_head.weight").parameter)
        << "a tied model must not hold a separate head a refit could leave stale";
    const TensorMap base = base_weights(kQwen2, model);
    TensorMap target = base;
    target[kEmbed] = perturbed(base, 17, DType::f32).at(kEmbed);
    const std::vector<float> before = logits_of(model);
    engine.update_weights_from_tensors({{kEmbed, target.at(kEmbed)}});
    auto fresh = fresh_model(model.config(), {}, target, quant, "");
    expect_same_bytes(model, *fresh, "embedding-only refit");
    const std::vector<float> after = logits_of(model);
    EXPECT_EQ(after, logits_of(*fresh));
    EXPECT_NE(after, before) << "the new embedding must reach the head";
  }
}

// Loader lifecycle: a transaction abandoned after staging (a trainer that died mid-way)
// leaves nothing behind, and the next transaction is not confused by it.
TEST(RefitReloadClasses, an_aborted_transaction_leaves_nothing_and_the_retry_is_exact) {
  EngineOptions options;
  options.model_path = kQwen2;
  Engine engine(options);
  const Model& model = engine.model();
  const TensorMap base = base_weights(kQwen2, model);
  const auto addresses_before = addresses(model);
  const uint64_t version = engine.weight_version();
  const TensorMap target = perturbed(base, 23, DType::bf16);
  {
    auto update = engine.begin_update();
    size_t n = 0;
    for (const auto& [name, tensor] : target)
      if (n++ % 2 == 0) update->update(name, tensor);
    update->abort();
    EXPECT_THROW(engine.commit(*update), Error) << "an aborted transaction cannot commit";
  }
  {  // Dropped without commit or abort: the same.
    auto update = engine.begin_update();
    for (const auto& [name, tensor] : target) update->update(name, tensor);
  }
  EXPECT_EQ(engine.weight_version(), version);
  auto original = fresh_model(model.config(), {}, base, "", "");
  expect_same_bytes(model, *original, "after the abandoned transactions");

  auto retry = engine.begin_update();
  for (const auto& [name, tensor] : target) retry->update(name, tensor);
  engine.commit(*retry);
  EXPECT_EQ(engine.weight_version(), version + 1);
  auto fresh = fresh_model(model.config(), {}, target, "", "");
  expect_same_bytes(model, *fresh, "the retried transaction");
  EXPECT_EQ(logits_of(model), logits_of(*fresh));
  EXPECT_EQ(addresses(model), addresses_before);
  // A finished transaction replayed is refused, not applied twice.
  EXPECT_THROW(engine.commit(*retry), Error);
  EXPECT_EQ(engine.weight_version(), version + 1);
}

// Cache coherence between transactions: two staged at once commit in the order they are
// committed, each writing exactly what it staged, whichever was begun first.
TEST(RefitReloadClasses, interleaved_transactions_apply_in_commit_order) {
  EngineOptions options;
  options.model_path = kQwen2;
  Engine engine(options);
  const Model& model = engine.model();
  const TensorMap base = base_weights(kQwen2, model);
  const TensorMap first = perturbed(base, 31, DType::f32);
  const TensorMap second = perturbed(base, 37, DType::f32);
  auto a = engine.begin_update();
  auto b = engine.begin_update();
  for (const auto& [name, tensor] : first) a->update(name, tensor);
  for (const auto& [name, tensor] : second) b->update(name, tensor);
  engine.commit(*b);
  engine.commit(*a);
  auto fresh = fresh_model(model.config(), {}, first, "", "");
  expect_same_bytes(model, *fresh, "the last committed transaction");
  EXPECT_EQ(logits_of(model), logits_of(*fresh));
}

}  // namespace
}  // namespace refit
