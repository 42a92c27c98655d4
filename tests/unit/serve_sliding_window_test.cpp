// Sliding-window attention in the server's paged cache: when every layer slides, blocks
// that no query can see again go back to the pool as the sequence grows, so a request
// longer than the pool completes, with the tokens and logprobs of the contiguous path.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "runtime/generator.h"
#include "runtime/scheduler.h"
#include "serve_test_model.h"

namespace refit {
namespace {

using namespace std::chrono_literals;

ModelConfig windowed_config(int64_t window) {
  ModelConfig c = testing::serve_test_config(Architecture::mistral);
  c.rope_style = ops::RopeStyle::neox;
  c.sliding_window = window;
  return c;
}

std::vector<int32_t> prompt_of(int64_t n) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((i * 53 + 11) % 290 + 3));
  return p;
}

struct ServedRun {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish, error;
  bool busy = false;
};

ServedRun serve(const Model& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                int64_t blocks) {
  std::shared_mutex mutex;
  SchedulerOptions o;
  o.kv_blocks = blocks;
  o.block_size = 4;
  o.max_step_tokens = 5;  // chunked prefill too
  Scheduler sched(
      model, mutex, [] { return uint64_t{1}; }, o);
  RequestSpec spec;
  spec.prompt = prompt;
  spec.max_tokens = max_tokens;
  spec.sampling.temperature = 0;
  std::shared_ptr<RequestHandle> h;
  try {
    h = sched.submit(spec);
  } catch (const CapacityExceeded& e) {
    return {{}, {}, "refused", e.what(), true};
  }
  ServedRun r;
  RequestHandle::Event e;
  while (h->next(e, 30s)) {
    if (e.kind == RequestHandle::Event::token) {
      r.tokens.push_back(e.token_event.token);
      r.logprobs.push_back(e.token_event.logprob);
    } else if (e.kind == RequestHandle::Event::finished) {
      r.finish = e.finish_reason;
      r.error = e.error;
      r.busy = e.busy;
      break;
    }
  }
  return r;
}

TEST(SlidingWindowServing, BlocksOutsideEveryWindowAreFreedAndTokensMatchTheContiguousPath) {
  const ModelConfig c = windowed_config(8);
  auto model = testing::serve_test_model(c, DType::f32);
  const std::vector<int32_t> prompt = prompt_of(10);
  GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = 90;
  req.sampling.temperature = 0;
  const GenerateResult want = generate(*model, req);
  ASSERT_EQ(want.tokens.size(), 90u);

  // 100 positions need 25 blocks of 4; the pool has 8. Only the window (8 positions, at
  // most 3 blocks) plus the block being filled need to stay.
  const ServedRun got = serve(*model, prompt, 90, 8);
  EXPECT_EQ(got.finish, "length") << got.error;
  EXPECT_EQ(got.tokens, want.tokens);

  // The window really masks: the same weights without a window attend further back.
  auto full = testing::serve_test_model(windowed_config(0), DType::f32);
  EXPECT_NE(generate(*full, req).tokens, want.tokens);
}

TEST(SlidingWindowServing, ModelsWithAFullAttentionLayerKeepEveryBlock) {
  ModelConfig c = windowed_config(8);
  c.layers = {c.layer(0), c.layer(1)};
  c.layers[1].window = 0;  // one global layer: every position stays visible
  auto model = testing::serve_test_model(c, DType::f32);
  // The same request as above cannot fit 8 blocks: it is refused up front.
  const ServedRun refused = serve(*model, prompt_of(10), 90, 8);
  EXPECT_EQ(refused.finish, "refused");
  EXPECT_NE(refused.error.find("the KV cache holds 32 tokens; this request needs 100"),
            std::string::npos)
      << refused.error;
  // With room for all 100 positions it runs as the contiguous path does.
  GenerateRequest req;
  req.prompt = prompt_of(10);
  req.max_tokens = 90;
  req.sampling.temperature = 0;
  const ServedRun got = serve(*model, req.prompt, 90, 25);
  EXPECT_EQ(got.finish, "length") << got.error;
  EXPECT_EQ(got.tokens, generate(*model, req).tokens);
}

}  // namespace
}  // namespace refit
