// The limits that need the engine's pieces: per-route body limits sized from the model, and
// the scheduler's side (the queue timeout while paused, prompt logprobs at a tiny
// temperature). The parsers' side is serve_request_limits_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "runtime/scheduler.h"
#include "serve_test_model.h"
#include "server/body_limits.h"

namespace refit {
namespace {

using namespace std::chrono_literals;

// ---- body limits ----

TEST(ServeBodyLimits, body_limits_are_per_route_and_sized_from_the_model) {
  BodyLimitInputs in;
  in.context = 1 << 17;
  in.text_bytes_per_token = 128;
  in.parameter_elements = int64_t{1} << 30;
  const BodyLimits l = body_limits(in);
  EXPECT_EQ(l.for_path("/update_weights_from_disk"), size_t{1} << 20);
  EXPECT_EQ(l.for_path("/v1/completions"), (size_t{1} << 17) * 128 * 8);
  EXPECT_EQ(l.for_path("/generate"), l.generation);
  EXPECT_EQ(l.for_path("/update_weights_from_tensor"), (size_t{16} << 30) / 3 + (size_t{64} << 20));
  EXPECT_EQ(l.largest(), l.tensor);
  BodyLimitInputs small;  // a tiny model: the floors
  small.context = 256;
  small.text_bytes_per_token = 10;
  small.parameter_elements = 1000;
  EXPECT_EQ(body_limits(small).generation, size_t{64} << 20);
  EXPECT_EQ(body_limits(small).tensor, 5333 + (size_t{64} << 20));
  small.override_bytes = 12345;
  EXPECT_EQ(body_limits(small).for_path("/health"), 12345u);
  EXPECT_EQ(body_limits(small).for_path("/update_weights_from_tensor"), 12345u);
}

class LimitsSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::serve_test_config();
    model_ = testing::serve_test_model(config_, DType::f32);
  }
  std::unique_ptr<Scheduler> make(SchedulerOptions o = {}) {
    return std::make_unique<Scheduler>(
        *model_, mutex_, [] { return uint64_t{1}; }, o);
  }
  ModelConfig config_;
  std::unique_ptr<Model> model_;
  std::shared_mutex mutex_;
};

TEST_F(LimitsSchedulerTest, prompt_logprobs_at_a_tiny_temperature_are_finite) {
  auto sched = make();
  for (LogprobMode mode : {LogprobMode::processed_logprobs, LogprobMode::sglang}) {
    RequestSpec spec;
    spec.prompt = {1, 5, 9, 13, 17, 21};
    spec.max_tokens = 2;
    spec.sampling.temperature = 1e-38f;
    spec.logprob_mode = mode;
    spec.prompt_logprobs_from = 1;
    spec.prompt_top_logprobs = 2;
    auto h = sched->submit(spec);
    int prompt_rows = 0;
    for (RequestHandle::Event e; h->next(e, 30s);) {
      for (const TokenEvent& t : e.prompt_logprobs) {
        ++prompt_rows;
        EXPECT_TRUE(std::isfinite(t.logprob) && t.logprob <= 0) << t.logprob;
        for (const TokenLogprob& x : t.top) EXPECT_TRUE(std::isfinite(x.logprob));
      }
      if (e.kind == RequestHandle::Event::token) {
        EXPECT_TRUE(std::isfinite(e.token_event.logprob)) << e.token_event.logprob;
      }
      if (e.kind == RequestHandle::Event::finished) break;
    }
    EXPECT_EQ(prompt_rows, 5);
  }
}

TEST_F(LimitsSchedulerTest, the_queue_timeout_holds_while_generation_is_paused) {
  SchedulerOptions o;
  o.queue_timeout_seconds = 0.2;
  auto sched = make(o);
  sched->pause(PauseMode::abort);
  RequestSpec spec;
  spec.prompt = {1, 2, 3};
  spec.max_tokens = 4;
  auto h = sched->submit(spec);
  RequestHandle::Event e;
  ASSERT_TRUE(h->next(e, 20s)) << "the paused request was never timed out";
  EXPECT_EQ(e.kind, RequestHandle::Event::finished);
  EXPECT_EQ(e.finish_reason, "error");
  EXPECT_TRUE(e.busy);
  EXPECT_NE(e.error.find("while generation was paused"), std::string::npos) << e.error;
  sched->resume();
}

// Requests a trainer's pause parks (retracted, restarted from the prompt, so nothing
// generated counts) wait out a pause longer than the queue timeout and then finish: the
// timeout is for requests that never started.
TEST_F(LimitsSchedulerTest, requests_retracted_by_a_pause_outlive_the_queue_timeout) {
  SchedulerOptions o;
  o.queue_timeout_seconds = 0.2;
  auto sched = make(o);
  RequestSpec spec;
  spec.prompt = {1, 2, 3};
  spec.max_tokens = 200;
  spec.restart_on_retract = true;
  // Slowed to ~2 ms a token (the hook runs on the scheduler's thread), so that the request
  // is surely still running when the pause comes: on a fast machine the tiny model's whole
  // output was done before the test read its first token.
  std::atomic<bool> slow{true};
  spec.on_event = [&slow] {
    if (slow.load()) std::this_thread::sleep_for(2ms);
  };
  auto h = sched->submit(spec);
  RequestHandle::Event e;
  ASSERT_TRUE(h->next(e, 20s));
  ASSERT_EQ(e.kind, RequestHandle::Event::token);  // running
  sched->pause(PauseMode::retract);
  slow.store(false);
  std::this_thread::sleep_for(800ms);  // four queue timeouts
  sched->resume();
  bool restarted = false;
  std::string finish_reason, error;
  while (h->next(e, 30s)) {
    if (e.kind == RequestHandle::Event::restart) restarted = true;
    if (e.kind == RequestHandle::Event::finished) {
      finish_reason = e.finish_reason;
      error = e.error;
      break;
    }
  }
  EXPECT_TRUE(restarted) << "the pause did not retract the running request";
  EXPECT_EQ(finish_reason, "length") << error;
}

}  // namespace
}  // namespace refit
