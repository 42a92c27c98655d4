// Continuous batching over a paged KV cache: the server's engine loop.
//
// One loop thread runs steps. Each step it drops cancelled requests, admits waiting ones
// while blocks and batch slots allow (FIFO), gives every running request its next token
// (decode) or its next prompt chunk (chunked prefill within a per-step token budget), runs
// ONE batched forward (models/model.h) under the weights' shared lock, and
// samples. Requests join and leave the batch between any two steps.
//
// KV pressure: a request needing a new block when none is free preempts the most recently
// admitted running request (its blocks are freed and it re-queues at the front, to be
// recomputed). Requests wait in a bounded queue; a full queue, or waiting longer than
// queue_timeout, ends them with CapacityExceeded (a front end answers "retry later").
//
// Refit between steps. run_exclusive(mode, fn) runs fn (a weight update) while no step
// is in flight:
//   drain   (default) stop admitting, let every started request finish on the old
//           weights, then update: each request sees one weight version.
//   abort   end every request (finish_reason "abort"), then update.
// pause(mode) / resume() are SGLang's /pause_generation and /continue_generation:
//   abort     end every request;
//   retract   free every running request's KV and re-queue it: a request that asked for
//             it (restart_on_retract, the server's non-streaming requests) restarts from
//             its prompt, so its whole output is on one weight version; others keep their
//             tokens and recompute the KV on resume;
//   in_place  keep everything; requests continue on the new weights with their old KV;
//   drain     stop admitting, let started requests finish, then pause (queued ones wait).
// Every generated token records the weight version it was sampled under.
//
// Batch invariance: a request's logits do not depend on the batch or the chunking
// (batched_forward.h), so its tokens and logprobs are the same alone or under load.
//
// Prefix cache (layers/paged_kv_cache.h): at admission a request shares the cached full
// blocks its context starts with (at most its first n-1 tokens, so at least one token is
// computed and yields logits) and starts computing after them — a prefix hit is just a
// prompt chunk boundary, which batch invariance already makes bitwise neutral. After each
// step the full blocks a request computed are published. A committed weight update, by
// any path (run_exclusive, or an Engine commit the scheduler only notices through the
// weight version), drops every cached key before the next admission: the next step
// compares the version with the one the cache was built on, under the same weights lock
// as the forward. Requests whose KV predates that (in_place pause) never publish again.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "layers/paged_kv_cache.h"
#include "models/model.h"
#include "runtime/sampler.h"

namespace refit {

// The scheduler is full (queue limit, queue timeout, a request larger than the cache, shutting
// down): the request is refused without any work done, and a retry later may succeed.
class CapacityExceeded : public Error {
 public:
  using Error::Error;
};

struct SchedulerOptions {
  int64_t block_size = 16;
  int64_t kv_blocks = 0;  // 0: enough for max_running full contexts, capped by kv_memory_bytes
  size_t kv_memory_bytes = size_t{1} << 30;
  int64_t max_running = 64;       // sequences per step
  int64_t max_step_tokens = 256;  // new tokens per step (prefill chunks share it)
  int64_t max_waiting = 4096;     // queued requests before CapacityExceeded
  double queue_timeout_seconds = 120;
  bool prefix_cache = true;  // share full KV blocks between requests with a common prefix
};

// Runs one step's batched forward pass. The default is batched_forward(model, batch, cache);
// tensor-parallel serving replaces it to run the same step on every rank.
using StepForward =
    std::function<BatchForwardResult(std::span<const BatchSequence>, PagedKvCache&)>;

enum class PauseMode : uint8_t { drain, abort, retract, in_place };
PauseMode pause_mode_from_name(const std::string& name);  // throws naming the mode
const char* pause_mode_name(PauseMode m);

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct TokenEvent {
  int32_t token = -1;
  float logprob = 0;  // in the request's LogprobMode (default raw: log_softmax of the logits)
  int64_t rank = 0;   // 1 + how many ids score higher than `token` (vLLM's Logprob.rank)
  uint64_t weight_version = 0;
  std::vector<TokenLogprob> top;  // the top_logprobs most likely tokens
  int64_t position = -1;          // prompt logprobs: the token's position in the prompt
  int64_t cached_tokens = 0;      // prompt tokens the prefix cache served at admission
};

struct RequestSpec {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;  // stop tokens cannot be sampled before this many tokens
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;
  int top_logprobs = 0;  // 0..vocab
  LogprobMode logprob_mode = LogprobMode::raw_logprobs;
  // false: the drawn tokens' logprob (NaN), rank (0) and top alternatives are not computed,
  // for a client that did not ask for them (OpenAI without `logprobs`, SGLang without
  // `return_logprob`). Scoring the whole vocabulary in double costs about as much per token
  // as a small model's attention; vLLM and SGLang skip it too.
  bool token_logprobs = true;
  // Prompt logprobs: the logprob of every prompt token at a position >= this (position 0
  // has none: nothing predicts it); -1: none. Prompt rows use the raw logits, or for the
  // processed and sglang modes the temperature-scaled ones (no penalties, no truncation:
  // those depend on a history the prompt does not have).
  int64_t prompt_logprobs_from = -1;
  int prompt_top_logprobs = 0;
  bool restart_on_retract = true;
  // Routing replay (mixture of experts): return every forwarded position's experts when the
  // request finishes (SGLang's return_routed_experts), and/or force them: i32 [rows, moe
  // layers, k] for positions 0..rows-1 (the rest route freely). Either computes the whole
  // context (no prefix-cache hit: a hit's routing was never seen); forced KV is never
  // published to the prefix cache (other requests would inherit the forced routing).
  bool return_routed_experts = false;
  std::vector<int32_t> forced_experts;
  // Called after every event pushed to the request's handle, outside its lock, on the
  // scheduler's thread: lets one consumer wait for many requests without polling each.
  // Must be quick and must not call back into the scheduler.
  std::function<void()> on_event;
};

// What a request's consumer (an HTTP handler thread) reads. Thread-safe.
class RequestHandle {
 public:
  struct Event {
    enum Kind : uint8_t { token, restart, finished, prompt } kind;
    TokenEvent token_event;     // kind == token
    std::string finish_reason;  // kind == finished: "stop", "length", "abort", "error"
    std::string error;          // kind == finished with "error"
    bool busy = false;          // the error is CapacityExceeded (retry later)
    int64_t cached_tokens =
        0;  // kind == finished: prompt tokens whose KV came from the prefix cache
    std::vector<TokenEvent> prompt_logprobs;  // kind == prompt: the next prompt positions' logprobs
    // kind == finished with return_routed_experts: i32 [positions, moe layers, k], every
    // position that went through the model (prompt + generated - 1: the last token never does).
    std::vector<int32_t> routed_experts;
  };
  // Blocks until the next event (or the timeout: then returns false).
  bool next(Event& event, std::chrono::milliseconds timeout);
  // The next event if there is one; never waits.
  bool try_next(Event& event);
  // The consumer is gone or has what it needs (stop string): the scheduler ends the
  // request and frees its blocks at the next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  uint64_t id() const { return id_; }

 private:
  friend class Scheduler;
  void push(Event e);
  uint64_t id_ = 0;
  std::function<void()> on_event_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

struct SchedulerStats {
  int64_t running = 0, waiting = 0;
  PagedKvCacheStats kv;
  uint64_t requests_finished = 0, requests_aborted = 0, requests_rejected = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0, steps = 0, preemptions = 0;
  uint64_t refits = 0, refit_failures = 0;
  double refit_seconds = 0;  // total
  bool paused = false;
  // Prefix cache: tokens looked up at admission and how many of them hit; invalidations
  // (weight updates and flushes) and the cached blocks they dropped.
  uint64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  uint64_t prefix_invalidations = 0, prefix_blocks_dropped = 0;
};

class Scheduler {
 public:
  Scheduler(const Model& model, std::shared_mutex& weights_mutex,
            std::function<uint64_t()> weight_version, SchedulerOptions options = {},
            StepForward forward = {});
  ~Scheduler();  // stops the loop; pending requests end with "abort"
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Throws Error for an invalid one (empty prompt, context overflow)
  // and CapacityExceeded when the queue is full or the request can never fit the cache.
  std::shared_ptr<RequestHandle> submit(RequestSpec spec);
  // A check submit() runs first (it throws to refuse the request): the engine owner's
  // "can these weights generate?" (released weights must never serve a token).
  void set_admission_check(std::function<void()> check);

  // Runs fn with no step in flight (see the file comment); fn's exception propagates
  // after generation resumes. Returns fn's duration in seconds.
  double run_exclusive(PauseMode mode, const std::function<void()>& fn);
  void pause(PauseMode mode);
  void resume();
  bool paused() const;
  // Drops every prefix-cache key (unreferenced cached blocks become free; nothing computed
  // before the flush is shared again). Returns how many cached blocks were dropped.
  int64_t flush_cache();
  // Requests running or queued (what SGLang's /flush_cache refuses to run under).
  int64_t unfinished() const;

  // The KV pool's memory goes back to the OS (its addresses stay; the pages read as zero
  // when touched again) after every cached block is dropped. Throws when requests hold
  // blocks. While released no step runs (requests wait); resume_kv_memory() ends that.
  size_t release_kv_memory();  // returns the bytes given back
  void resume_kv_memory();
  bool kv_released() const;

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }
  int64_t max_context() const { return model_.config().max_seq_len; }

 private:
  struct Sequence;
  void loop();
  bool step();  // false when there was nothing to run
  // step()'s parts, in the order it runs them (see scheduler.cpp).
  struct StepWork {
    Sequence* seq;
    int64_t n_new;  // tokens the forward pass computes for it
    bool sample;    // they end its pending tokens: a token is drawn from the last row
  };
  static bool wants_all_rows(const Sequence& s, int64_t n_new);
  void drop_expired_locked();
  void admit_locked();
  std::vector<StepWork> schedule_locked();
  void schedule_decodes_locked(std::vector<StepWork>& work, int64_t& budget);
  void schedule_prompt_chunks_locked(std::vector<StepWork>& work, int64_t& budget);
  BatchForwardResult run_forward(const std::vector<StepWork>& work, std::string& forward_error);
  void finish_step_locked(const std::vector<StepWork>& work, const BatchForwardResult& result,
                          const std::string& forward_error, uint64_t version);
  static void report_prompt_logprobs(Sequence& s, int64_t n_new, const BatchForwardResult& result,
                                     size_t index, uint64_t version, std::vector<double>& values,
                                     std::vector<float>& scaled);
  static TokenEvent draw_token(Sequence& s, std::span<const float> row, uint64_t version,
                               std::vector<double>& values);
  void emit_token_locked(Sequence& s, TokenEvent ev);
  void finish(Sequence& s, const std::string& reason, const std::string& error = {},
              bool busy = false);
  void retract(Sequence& s, bool restart);
  void abort_all_locked();
  // Ends the cancelled requests of running_ or waiting_ ("abort"), freeing their blocks.
  template <typename Queue>
  void drop_cancelled_locked(Queue& queue);
  void retract_all_locked(bool honour_restart);
  bool started_work_locked() const;
  void attach_cached_prefix_locked(Sequence& s);
  void detach_locked(Sequence& s);
  void publish_blocks_locked(Sequence& s);
  void release_out_of_window_locked(Sequence& s);
  int64_t invalidate_prefix_cache_locked();

  const Model& model_;
  std::shared_mutex& weights_mutex_;
  std::function<uint64_t()> weight_version_;
  SchedulerOptions options_;
  StepForward forward_;
  PagedKvCache cache_;
  uint64_t cache_version_ = 0;  // the weight version the cached blocks were computed on
  int64_t window_ = 0;          // the model's widest window when every layer slides; else 0
  uint64_t kv_epoch_ = 1;       // bumped by each invalidation; a sequence publishes only in its own

  mutable std::mutex mutex_;  // guards everything below and the cache
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  bool stop_ = false;
  bool paused_ = false;
  bool draining_ = false;     // run_exclusive(drain) is waiting for started requests
  bool exclusive_ = false;    // an exclusive fn is running
  bool stepping_ = false;     // the loop is inside a step
  bool kv_released_ = false;  // release_kv_memory(): no step until resumed
  std::function<void()> admission_check_;
  uint64_t next_id_ = 1;
  SchedulerStats counters_;
  std::vector<std::vector<double>> draw_scratch_;  // one logprob row per pool participant
  std::thread thread_;
};

}  // namespace refit
