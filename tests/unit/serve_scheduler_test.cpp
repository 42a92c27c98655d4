// The continuous-batching scheduler: batch invariance of tokens and logprobs under load
// and chunked prefill, backpressure, cancellation, and refit between steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "runtime/scheduler.h"
#include "serve_test_model.h"

namespace refit {
namespace {

using namespace std::chrono_literals;

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<uint64_t> versions;
  std::string finish_reason, error;
  bool busy = false;
  int restarts = 0;
};

Outcome collect(RequestHandle& h) {
  Outcome o;
  RequestHandle::Event e;
  while (true) {
    if (!h.next(e, 30s)) {
      o.finish_reason = "timeout";
      return o;
    }
    if (e.kind == RequestHandle::Event::token) {
      o.tokens.push_back(e.token_event.token);
      o.logprobs.push_back(e.token_event.logprob);
      o.versions.push_back(e.token_event.weight_version);
    } else if (e.kind == RequestHandle::Event::restart) {
      o.tokens.clear();
      o.logprobs.clear();
      o.versions.clear();
      ++o.restarts;
    } else {
      o.finish_reason = e.finish_reason;
      o.error = e.error;
      o.busy = e.busy;
      return o;
    }
  }
}

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

void load_seed(Model& model, uint64_t seed) {
  for (auto& [name, tensor] : synthetic_weights(model.config(), model.weight_dtype(), seed)) {
    CheckpointTarget target = model.parameters().target(name);
    if (!target.parameter) continue;
    if (target.sub_shard)
      target.parameter->load(*target.sub_shard, tensor);
    else
      target.parameter->load(tensor);
  }
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::serve_test_config();
    model_ = testing::serve_test_model(config_, DType::f32);
  }
  std::unique_ptr<Scheduler> make(SchedulerOptions o = {}) {
    return std::make_unique<Scheduler>(
        *model_, mutex_, [this] { return version_.load(); }, o);
  }
  RequestSpec greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
    RequestSpec s;
    s.prompt = std::move(prompt);
    s.max_tokens = max_tokens;
    s.top_logprobs = 3;
    return s;
  }
  ModelConfig config_;
  std::unique_ptr<Model> model_;
  std::shared_mutex mutex_;
  std::atomic<uint64_t> version_{1};
};

TEST_F(SchedulerTest, greedy_tokens_and_logprobs_are_bitwise_equal_alone_in_batches_and_chunked) {
  const std::vector<int32_t> prompt = random_tokens(45, 7, config_.vocab_size);
  Outcome alone;
  {
    auto sched = make();
    alone = collect(*sched->submit(greedy(prompt, 24)));
  }
  ASSERT_EQ(alone.finish_reason, "length");
  ASSERT_EQ(alone.tokens.size(), 24u);

  for (int others : {1, 7, 32}) {
    SCOPED_TRACE(std::to_string(others) + " other requests");
    auto sched = make();
    std::vector<std::shared_ptr<RequestHandle>> hs;
    // Half start before the target (it joins a running batch), half after.
    for (int i = 0; i < others / 2; ++i)
      hs.push_back(sched->submit(
          greedy(random_tokens(5 + i * 3 % 40, 100 + i, config_.vocab_size), 10 + i % 20)));
    std::this_thread::sleep_for(5ms);
    auto target = sched->submit(greedy(prompt, 24));
    for (int i = others / 2; i < others; ++i) {
      RequestSpec s =
          greedy(random_tokens(5 + i * 3 % 40, 100 + i, config_.vocab_size), 10 + i % 20);
      s.sampling.temperature = 0.8f;
      s.sampling.seed = static_cast<uint64_t>(i);
      hs.push_back(sched->submit(s));
    }
    Outcome got = collect(*target);
    EXPECT_EQ(got.tokens, alone.tokens);
    EXPECT_EQ(0, std::memcmp(got.logprobs.data(), alone.logprobs.data(),
                             alone.logprobs.size() * sizeof(float)));
    for (auto& h : hs) EXPECT_EQ(collect(*h).finish_reason, "length");
    EXPECT_EQ(sched->stats().kv.used_blocks, 0);
  }
  // Chunked prefill: 45 prompt tokens through a 8-token-per-step budget, with company.
  {
    SchedulerOptions o;
    o.max_step_tokens = 8;
    auto sched = make(o);
    auto other = sched->submit(greedy(random_tokens(30, 3, config_.vocab_size), 30));
    auto target = sched->submit(greedy(prompt, 24));
    Outcome got = collect(*target);
    EXPECT_EQ(got.tokens, alone.tokens);
    EXPECT_EQ(0, std::memcmp(got.logprobs.data(), alone.logprobs.data(),
                             alone.logprobs.size() * sizeof(float)));
    collect(*other);
  }
}

TEST_F(SchedulerTest, logprobs_are_raw_log_softmax_and_not_affected_by_temperature) {
  auto sched = make();
  RequestSpec s = greedy(random_tokens(10, 1, config_.vocab_size), 8);
  Outcome g = collect(*sched->submit(s));
  // Same prompt, sampled at a high temperature with a fixed seed: the first token's
  // reported logprob is the raw one of whatever token was drawn.
  s.sampling.temperature = 5.0f;
  s.sampling.seed = 42;
  Outcome t1 = collect(*sched->submit(s));
  Outcome t2 = collect(*sched->submit(s));
  EXPECT_EQ(t1.tokens, t2.tokens);  // same seed, same draws
  for (float lp : g.logprobs) EXPECT_LE(lp, 0.0f);
  if (t1.tokens[0] == g.tokens[0]) {
    EXPECT_EQ(t1.logprobs[0], g.logprobs[0]);
  } else
    EXPECT_LT(t1.logprobs[0], g.logprobs[0]);  // greedy took the most likely token
}

TEST_F(SchedulerTest, tokens_without_logprobs_are_the_same_draws_and_carry_no_logprob) {
  auto sched = make();
  for (const float temperature : {0.0f, 0.9f}) {
    SCOPED_TRACE(::testing::Message() << "temperature " << temperature);
    RequestSpec with = greedy(random_tokens(12, 5, config_.vocab_size), 10);
    with.sampling.temperature = temperature;
    with.sampling.seed = 3;
    RequestSpec without = with;
    without.token_logprobs = false;
    // Side by side in one batch, and the skipped scoring changes no draw.
    auto a = sched->submit(with);
    auto b = sched->submit(without);
    const Outcome scored = collect(*a), bare = collect(*b);
    ASSERT_EQ(bare.finish_reason, "length");
    EXPECT_EQ(bare.tokens, scored.tokens);
    for (size_t i = 0; i < scored.logprobs.size(); ++i) {
      EXPECT_LE(scored.logprobs[i], 0.0f);
      EXPECT_TRUE(std::isnan(bare.logprobs[i])) << "token " << i;
    }
  }
}

TEST_F(SchedulerTest, a_full_queue_and_an_oversized_request_get_server_busy) {
  SchedulerOptions o;
  o.kv_blocks = 4;  // 64 tokens
  o.max_waiting = 2;
  o.max_running = 1;
  auto sched = make(o);
  EXPECT_THROW(sched->submit(greedy(random_tokens(60, 1, config_.vocab_size), 20)),
               CapacityExceeded);
  sched->pause(PauseMode::in_place);  // nothing is admitted: the queue fills
  auto a = sched->submit(greedy(random_tokens(5, 1, config_.vocab_size), 4));
  auto b = sched->submit(greedy(random_tokens(5, 2, config_.vocab_size), 4));
  try {
    sched->submit(greedy(random_tokens(5, 3, config_.vocab_size), 4));
    FAIL() << "expected CapacityExceeded";
  } catch (const CapacityExceeded& e) {
    EXPECT_NE(std::string(e.what()).find("capacity"), std::string::npos) << e.what();
  }
  sched->resume();
  EXPECT_EQ(collect(*a).finish_reason, "length");
  EXPECT_EQ(collect(*b).finish_reason, "length");
  // Invalid requests are errors, not 503.
  EXPECT_THROW(sched->submit(greedy({}, 4)), Error);
  EXPECT_THROW(sched->submit(greedy({1, 2}, -1)), Error);
  EXPECT_THROW(sched->submit(greedy({1, 9999}, 4)), Error);
  EXPECT_THROW(sched->submit(greedy(random_tokens(250, 1, config_.vocab_size), 10)),
               Error);  // context 256
}

TEST_F(SchedulerTest, requests_queue_when_the_cache_is_full_and_preemption_keeps_results_exact) {
  const std::vector<int32_t> prompt = random_tokens(20, 9, config_.vocab_size);
  Outcome alone = collect(*make()->submit(greedy(prompt, 40)));
  SchedulerOptions o;
  o.kv_blocks = 12;  // 192 tokens for 6 requests of up to 60: they must queue or be preempted
  // Submitted all at once (while paused: the same schedule on every run) and one by one
  // as the scheduler runs. Whichever request runs out of blocks first, the newest one is
  // preempted (possibly itself) and recomputed later: none ends early.
  for (bool at_once : {true, false}) {
    SCOPED_TRACE(at_once ? "submitted at once" : "submitted while running");
    auto sched = make(o);
    if (at_once) sched->pause(PauseMode::in_place);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 6; ++i) hs.push_back(sched->submit(greedy(prompt, 40)));
    if (at_once) sched->resume();
    for (auto& h : hs) {
      Outcome got = collect(*h);
      EXPECT_EQ(got.finish_reason, alone.finish_reason);
      EXPECT_EQ(got.tokens, alone.tokens);
      EXPECT_EQ(got.logprobs, alone.logprobs);
    }
    EXPECT_GT(sched->stats().preemptions, 0u);
    EXPECT_EQ(sched->stats().kv.used_blocks, 0);
  }
}

// Two requests in a pool of 5 blocks of 16: the older (31-token prompt) crosses a block
// boundary first and takes the last free block; when the newer one (20 tokens) then needs
// a block, it is the newest request, so it is the one preempted (recomputed later), not
// cut short.
TEST_F(SchedulerTest, the_newest_request_preempts_itself_when_no_block_is_free) {
  const std::vector<int32_t> older = random_tokens(31, 5, config_.vocab_size);
  const std::vector<int32_t> newer = random_tokens(20, 6, config_.vocab_size);
  const Outcome older_alone = collect(*make()->submit(greedy(older, 40)));
  const Outcome newer_alone = collect(*make()->submit(greedy(newer, 40)));
  SchedulerOptions o;
  o.kv_blocks = 5;
  o.block_size = 16;
  auto sched = make(o);
  sched->pause(PauseMode::in_place);
  auto a = sched->submit(greedy(older, 40));
  auto b = sched->submit(greedy(newer, 40));
  sched->resume();
  const Outcome got_a = collect(*a), got_b = collect(*b);
  EXPECT_EQ(got_a.finish_reason, older_alone.finish_reason);
  EXPECT_EQ(got_a.tokens, older_alone.tokens);
  EXPECT_EQ(got_a.logprobs, older_alone.logprobs);
  EXPECT_EQ(got_b.finish_reason, newer_alone.finish_reason);
  EXPECT_EQ(got_b.tokens, newer_alone.tokens);
  EXPECT_EQ(got_b.logprobs, newer_alone.logprobs);
  EXPECT_GE(sched->stats().preemptions, 1u);
  EXPECT_EQ(sched->stats().kv.used_blocks, 0);
}

TEST_F(SchedulerTest, cancelled_requests_free_their_blocks) {
  SchedulerOptions o;
  o.max_step_tokens = 1;  // a 200-token prompt takes 200 steps: time to cancel it mid-way
  auto sched = make(o);
  auto h = sched->submit(greedy(random_tokens(200, 1, config_.vocab_size), 20));
  for (int i = 0; i < 2000 && sched->stats().kv.used_blocks == 0; ++i)
    std::this_thread::sleep_for(1ms);
  sched->pause(PauseMode::in_place);
  EXPECT_EQ(sched->stats().running, 1);
  EXPECT_GT(sched->stats().kv.used_blocks, 0);
  h->cancel();
  sched->resume();
  Outcome rest = collect(*h);
  EXPECT_EQ(rest.finish_reason, "abort");
  EXPECT_EQ(sched->stats().kv.used_blocks, 0);
  EXPECT_EQ(sched->stats().requests_aborted, 1u);
}

TEST_F(SchedulerTest, refit_drains_so_every_request_sees_one_weight_version) {
  const std::vector<int32_t> prompt = random_tokens(12, 4, config_.vocab_size);
  Outcome v1 = collect(*make()->submit(greedy(prompt, 30)));
  load_seed(*model_, 2);
  Outcome v2 = collect(*make()->submit(greedy(prompt, 30)));
  load_seed(*model_, 1);
  ASSERT_NE(v1.tokens, v2.tokens);

  auto sched = make();
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int i = 0; i < 8; ++i) hs.push_back(sched->submit(greedy(prompt, 30)));
  std::thread refit([&] {
    std::this_thread::sleep_for(2ms);
    sched->run_exclusive(PauseMode::drain, [&] {
      std::unique_lock lock(mutex_);
      load_seed(*model_, 2);
      ++version_;
    });
  });
  for (int i = 0; i < 8; ++i) hs.push_back(sched->submit(greedy(prompt, 30)));
  refit.join();
  for (auto& h : hs) {
    Outcome o = collect(*h);
    ASSERT_EQ(o.tokens.size(), 30u);
    const uint64_t v = o.versions.front();
    for (uint64_t x : o.versions) EXPECT_EQ(x, v);
    EXPECT_EQ(o.tokens, v == 1 ? v1.tokens : v2.tokens) << "version " << v;
  }
  EXPECT_EQ(sched->stats().refits, 1u);
  // A failed update changes nothing and generation goes on.
  EXPECT_THROW(sched->run_exclusive(PauseMode::drain, [] { fail("wrong shape"); }), Error);
  EXPECT_EQ(collect(*sched->submit(greedy(prompt, 30))).tokens, v2.tokens);
  EXPECT_EQ(sched->stats().refit_failures, 1u);
}

TEST_F(SchedulerTest, pause_modes_abort_retract_and_in_place) {
  const std::vector<int32_t> prompt = random_tokens(12, 4, config_.vocab_size);
  // Long enough that a request is still running when the test pauses after its first token.
  constexpr int64_t kLong = 240;
  Outcome v1 = collect(*make()->submit(greedy(prompt, kLong)));
  load_seed(*model_, 2);
  Outcome v2 = collect(*make()->submit(greedy(prompt, kLong)));
  load_seed(*model_, 1);
  auto sched = make();
  auto update = [&](uint64_t seed) {
    sched->run_exclusive(PauseMode::in_place, [&] {
      std::unique_lock lock(mutex_);
      load_seed(*model_, seed);
      ++version_;
    });
  };
  // Submits a request and pauses with `mode` once it has produced a token and is still
  // running. On a loaded machine the test thread can lose the CPU long enough for the
  // request to finish first; then it is collected and the attempt repeated.
  auto paused_mid_run = [&](PauseMode mode) -> std::shared_ptr<RequestHandle> {
    for (int attempt = 0; attempt < 20; ++attempt) {
      auto h = sched->submit(greedy(prompt, kLong));
      RequestHandle::Event e;
      EXPECT_TRUE(h->next(e, 10s));
      EXPECT_EQ(e.kind, RequestHandle::Event::token);
      sched->pause(mode);
      const SchedulerStats st = sched->stats();
      // abort: still counted until collected; retract: back in the queue; in_place: running.
      if (mode == PauseMode::abort || st.running + st.waiting > 0) return h;
      EXPECT_EQ(collect(*h).finish_reason, "length");  // it finished before the pause
      sched->resume();
    }
    ADD_FAILURE() << "the request always finished before the pause";
    return nullptr;
  };
  // abort: running requests end with "abort" and free their blocks (one that finished
  // before the pause reached it ends with "length": tried again).
  bool aborted = false;
  for (int attempt = 0; attempt < 20 && !aborted; ++attempt) {
    auto a = paused_mid_run(PauseMode::abort);
    ASSERT_TRUE(a);
    const std::string reason = collect(*a).finish_reason;
    EXPECT_TRUE(reason == "abort" || reason == "length") << reason;
    aborted = reason == "abort";
    EXPECT_EQ(sched->stats().kv.used_blocks, 0);
    sched->resume();
  }
  EXPECT_TRUE(aborted);
  // retract with restart: the request re-runs from its prompt on the new weights.
  auto r = paused_mid_run(PauseMode::retract);
  ASSERT_TRUE(r);
  EXPECT_EQ(sched->stats().kv.used_blocks, 0);
  update(2);
  sched->resume();
  Outcome ro = collect(*r);
  EXPECT_EQ(ro.restarts, 1);
  EXPECT_EQ(ro.tokens, v2.tokens);
  for (uint64_t v : ro.versions) EXPECT_EQ(v, 2u);
  // in_place: the request keeps its KV and continues on the new weights; the versions
  // of its tokens say where the switch happened.
  auto p = paused_mid_run(PauseMode::in_place);
  ASSERT_TRUE(p);
  EXPECT_GT(sched->stats().kv.used_blocks, 0);
  update(1);
  sched->resume();
  Outcome po = collect(*p);
  EXPECT_EQ(po.finish_reason, "length");
  // Tokens before the pause are on version 2, after it on 3, never mixed back.
  EXPECT_TRUE(std::is_sorted(po.versions.begin(), po.versions.end()));
  EXPECT_GE(po.versions.front(), 2u);
  EXPECT_EQ(po.versions.back(), 3u);
}

}  // namespace
}  // namespace refit
