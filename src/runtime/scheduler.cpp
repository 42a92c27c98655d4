#include "runtime/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/thread_pool.h"
#include "models/architecture.h"
#include "models/model.h"
#include "models/moe_routing.h"

namespace refit {

using Clock = std::chrono::steady_clock;

PauseMode pause_mode_from_name(const std::string& name) {
  if (name == "abort") return PauseMode::abort;
  if (name == "retract") return PauseMode::retract;
  if (name == "in_place") return PauseMode::in_place;
  if (name == "drain") return PauseMode::drain;
  fail("unknown pause mode '{}' (use abort, retract or in_place)", name);
}

const char* pause_mode_name(PauseMode m) {
  switch (m) {
    case PauseMode::drain:
      return "drain";
    case PauseMode::abort:
      return "abort";
    case PauseMode::retract:
      return "retract";
    case PauseMode::in_place:
      return "in_place";
  }
  return "?";
}

// ---- RequestHandle ----

bool RequestHandle::next(Event& event, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  event = std::move(events_.front());
  events_.pop_front();
  return true;
}

bool RequestHandle::try_next(Event& event) {
  std::lock_guard lock(mutex_);
  if (events_.empty()) return false;
  event = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestHandle::push(Event e) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
  if (on_event_) on_event_();
}

// ---- Scheduler ----

struct Scheduler::Sequence {
  std::shared_ptr<RequestHandle> handle;
  RequestSpec spec;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t n_prompt = 0;
  int64_t cached = 0;  // positions whose k/v are in the cache
  std::vector<int32_t> table;
  std::vector<PagedKvCache::BlockKey> block_keys;  // keys of its leading full blocks (prefix cache)
  uint64_t kv_epoch = 0;                           // the cache epoch its KV was started in
  std::unique_ptr<Sampler> sampler;
  Clock::time_point queued_at;
  // Admitted once (and retracted since): the queue timeout no longer applies. A trainer's
  // pause_generation(retract) or a long weight update parks running requests, which must
  // survive it however long it takes, as in SGLang; only requests never started time out.
  bool admitted_before = false;
  int64_t prompt_lp_next = 0;   // the next prompt position whose logprob is still to be sent
  int64_t cached_tokens = 0;    // prompt tokens the prefix cache served at the last admission
  std::vector<int32_t> routed;  // return_routed_experts: per position [moe layers, k]
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
  bool wants_prompt_logprobs() const {
    return spec.prompt_logprobs_from >= 0 && prompt_lp_next < n_prompt;
  }
};

namespace {

int64_t auto_blocks(const Model& model, const SchedulerOptions& o) {
  if (o.kv_blocks > 0) return o.kv_blocks;
  const ModelConfig& c = model.config();
  const int64_t kv_heads = model.local_kv_heads();
  const int64_t block_bytes = 2 * c.n_layers * o.block_size * kv_heads * c.head_dim * 4;
  const int64_t want = o.max_running * ((c.max_seq_len + o.block_size - 1) / o.block_size);
  const int64_t cap = std::max<int64_t>(
      1, static_cast<int64_t>(o.kv_memory_bytes) / std::max<int64_t>(block_bytes, 1));
  return std::max<int64_t>(1, std::min(want, cap));
}

// Routing replay's checks at submission: a mixture-of-experts model, whole rows of valid,
// distinct experts, no more positions than the request can have.
void check_routing_replay(const RequestSpec& spec, const ModelConfig& c) {
  if (!spec.return_routed_experts && spec.forced_experts.empty()) return;
  const int64_t per = moe_routing_width(c);
  if (per == 0)
    fail("routed_experts: this model has no mixture-of-experts layers to route ({} is dense)",
         architecture_name(c.arch));
  const std::vector<int32_t>& f = spec.forced_experts;
  if (f.empty()) return;
  const int64_t k = c.n_experts_used, layers = per / k;
  const int64_t rows = static_cast<int64_t>(f.size()) / per;
  if (rows * per != static_cast<int64_t>(f.size()))
    fail("routed_experts: {} ids are not whole rows of [{} layers, {} experts per token]", f.size(),
         layers, k);
  const int64_t positions = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens;
  if (rows > positions)
    fail("routed_experts: {} positions given, the request has at most {}", rows, positions);
  for (int64_t r = 0; r < rows * layers; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = f[static_cast<size_t>(r * k + j)];
      if (e < 0 || e >= c.n_experts)
        fail("routed_experts: position {} layer {} slot {} names expert {} (the model has {})",
             r / layers, r % layers, j, e, c.n_experts);
      for (int64_t i = 0; i < j; ++i)
        if (f[static_cast<size_t>(r * k + i)] == e)
          fail("routed_experts: position {} layer {} names expert {} twice", r / layers, r % layers,
               e);
    }
}

// Log-probabilities of a logits row: x - max - log(sum exp(x - max)), summed in a fixed
// order (double) so the value depends only on the row. With `kept` (a truncated draw's
// survivors) the others are -inf and the softmax runs over the survivors only; with
// `as_logits` the values themselves are reported (vLLM's *_logits modes).
void score_row(std::span<const float> logits, bool as_logits, std::span<const int32_t> kept,
               bool kept_all, std::vector<double>& out) {
  out.resize(logits.size());
  if (!kept_all) {
    std::fill(out.begin(), out.end(), -INFINITY);
    for (int32_t id : kept) out[static_cast<size_t>(id)] = logits[static_cast<size_t>(id)];
  } else {
    for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i];
  }
  if (as_logits) return;
  double mx = -INFINITY;
  for (double v : out) mx = std::max(mx, v);
  double sum = 0;
  for (double v : out) sum += std::exp(v - mx);
  const double lse = mx + std::log(sum);
  for (double& v : out) v -= lse;
}

RequestHandle::Event make_event(RequestHandle::Event::Kind kind) {
  RequestHandle::Event e;
  e.kind = kind;
  return e;
}

bool reports_logits(LogprobMode m) {
  return m == LogprobMode::raw_logits || m == LogprobMode::processed_logits;
}
bool reports_raw(LogprobMode m) {
  return m == LogprobMode::raw_logprobs || m == LogprobMode::raw_logits;
}

// The `k` best ids of `values` (ties: lower id first) with their values.
std::vector<TokenLogprob> top_of(const std::vector<double>& values, int k) {
  std::vector<TokenLogprob> top;
  if (k <= 0) return top;
  const size_t n = std::min<size_t>(static_cast<size_t>(k), values.size());
  std::vector<int32_t> ids(values.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](int32_t a, int32_t b) {
                      const double va = values[static_cast<size_t>(a)],
                                   vb = values[static_cast<size_t>(b)];
                      return va > vb || (va == vb && a < b);
                    });
  for (size_t j = 0; j < n; ++j)
    top.push_back({ids[j], static_cast<float>(values[static_cast<size_t>(ids[j])])});
  return top;
}

int64_t rank_of(const std::vector<double>& values, int32_t token) {
  const double v = values[static_cast<size_t>(token)];
  int64_t higher = 0;
  for (double x : values) higher += x > v;
  return higher + 1;
}

}  // namespace

Scheduler::Scheduler(const Model& model, std::shared_mutex& weights_mutex,
                     std::function<uint64_t()> weight_version, SchedulerOptions options,
                     StepForward forward)
    : model_(model),
      weights_mutex_(weights_mutex),
      weight_version_(std::move(weight_version)),
      options_(options),
      forward_(std::move(forward)),
      cache_(make_paged_cache(model, auto_blocks(model, options), options.block_size)) {
  if (!forward_)
    forward_ = [&model](std::span<const BatchSequence> batch, PagedKvCache& cache) {
      return batched_forward(model, batch, cache);
    };
  window_ = model.config().max_window();
  cache_version_ = weight_version_();
  if (options_.max_running <= 0 || options_.max_step_tokens <= 0)
    fail("scheduler: max_running ({}) and max_step_tokens ({}) must be positive",
         options_.max_running, options_.max_step_tokens);
  options_.kv_blocks = cache_.n_blocks();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  abort_all_locked();
}

void Scheduler::set_admission_check(std::function<void()> check) {
  std::lock_guard lock(mutex_);
  admission_check_ = std::move(check);
}

std::shared_ptr<RequestHandle> Scheduler::submit(RequestSpec spec) {
  std::function<void()> admission;
  {
    std::lock_guard lock(mutex_);
    admission = admission_check_;
  }
  if (admission) admission();
  const ModelConfig& c = model_.config();
  if (spec.prompt.empty()) fail("the prompt is empty (no tokens)");
  for (int32_t t : spec.prompt)
    if (t < 0 || t >= c.vocab_size)
      fail("prompt token id {} is outside the vocabulary (0..{})", t, c.vocab_size - 1);
  if (spec.max_tokens < 0) fail("max_tokens must be >= 0, got {}", spec.max_tokens);
  const int64_t n_prompt = static_cast<int64_t>(spec.prompt.size());
  if (spec.max_tokens > c.max_seq_len ||
      n_prompt + std::max<int64_t>(spec.max_tokens, 1) > c.max_seq_len)
    fail(
        "this model's maximum context length is {} tokens; the request has {} prompt tokens and "
        "max_tokens {} ({} in all)",
        c.max_seq_len, n_prompt, spec.max_tokens, n_prompt + spec.max_tokens);
  spec.sampling.validate();
  if (spec.top_logprobs < 0 || spec.top_logprobs > c.vocab_size)
    fail("top_logprobs must be in 0..{} (the vocabulary), got {}", c.vocab_size, spec.top_logprobs);
  if (spec.prompt_top_logprobs < 0 || spec.prompt_top_logprobs > c.vocab_size)
    fail("prompt top logprobs must be in 0..{} (the vocabulary), got {}", c.vocab_size,
         spec.prompt_top_logprobs);
  if (spec.min_tokens < 0) fail("min_tokens must be >= 0, got {}", spec.min_tokens);
  if (spec.prompt_logprobs_from < -1)
    fail("the prompt logprob start must be >= 0 (or -1: none), got {}", spec.prompt_logprobs_from);
  check_routing_replay(spec, c);
  // Positions held at once: all of them, or with a window on every layer, the prompt
  // (admitted whole) and then a window plus the blocks it straddles.
  const int64_t total = n_prompt + std::max<int64_t>(spec.max_tokens, 1);
  const int64_t held =
      window_ > 0 ? std::min(total, std::max(n_prompt + 1, window_ + 2 * cache_.block_size()))
                  : total;
  if (cache_.blocks_for(held) > cache_.n_blocks())
    throw CapacityExceeded(fmt::format("the KV cache holds {} tokens; this request needs {}",
                                       cache_.n_blocks() * cache_.block_size(),
                                       window_ > 0 ? held : n_prompt + spec.max_tokens));
  auto seq = std::make_unique<Sequence>();
  seq->handle = std::make_shared<RequestHandle>();
  seq->handle->on_event_ = spec.on_event;
  seq->tokens = spec.prompt;
  seq->n_prompt = n_prompt;
  seq->prompt_lp_next = std::max<int64_t>(spec.prompt_logprobs_from, 1);
  seq->sampler = std::make_unique<Sampler>(spec.sampling);
  seq->spec = std::move(spec);
  seq->queued_at = Clock::now();
  std::shared_ptr<RequestHandle> handle = seq->handle;
  {
    std::lock_guard lock(mutex_);
    if (stop_) throw CapacityExceeded("the server is shutting down");
    if (static_cast<int64_t>(waiting_.size()) >= options_.max_waiting) {
      ++counters_.requests_rejected;
      throw CapacityExceeded(fmt::format(
          "the server is at capacity: {} requests running and {} queued (limit {}); retry later",
          running_.size(), waiting_.size(), options_.max_waiting));
    }
    handle->id_ = next_id_++;
    waiting_.push_back(std::move(seq));
  }
  cv_.notify_all();
  return handle;
}

void Scheduler::finish(Sequence& s, const std::string& reason, const std::string& error,
                       bool busy) {
  const int64_t forwarded = s.cached;  // positions that went through the model
  detach_locked(s);
  if (reason == "abort")
    ++counters_.requests_aborted;
  else if (busy)
    ++counters_.requests_rejected;
  else
    ++counters_.requests_finished;
  RequestHandle::Event e = make_event(RequestHandle::Event::finished);
  e.finish_reason = reason;
  e.error = error;
  e.busy = busy;
  e.cached_tokens = s.cached_tokens;
  if (s.spec.return_routed_experts) {
    const size_t per_position = static_cast<size_t>(moe_routing_width(model_.config()));
    s.routed.resize(std::min(s.routed.size(), static_cast<size_t>(forwarded) * per_position));
    e.routed_experts = std::move(s.routed);
  }
  s.handle->push(std::move(e));
}

void Scheduler::retract(Sequence& s, bool restart) {
  detach_locked(s);
  s.queued_at = Clock::now();
  s.admitted_before = true;
  if (restart && s.generated() > 0) {
    s.tokens.resize(static_cast<size_t>(s.n_prompt));
    s.sampler = std::make_unique<Sampler>(s.spec.sampling);  // same seed: reproducible re-run
    s.prompt_lp_next =
        std::max<int64_t>(s.spec.prompt_logprobs_from, 1);  // re-scored on the new weights
    s.handle->push(make_event(RequestHandle::Event::restart));
  }
}

void Scheduler::detach_locked(Sequence& s) {
  // Published blocks stay cached (evictable) once no sequence holds them. Entries of
  // blocks already given back (out of every window) are -1.
  std::vector<int32_t> held;
  for (int32_t b : s.table)
    if (b >= 0) held.push_back(b);
  if (!held.empty()) cache_.release(held);
  s.table.clear();
  s.block_keys.clear();
  s.cached = 0;
}

void Scheduler::attach_cached_prefix_locked(Sequence& s) {
  s.kv_epoch = kv_epoch_;
  if (!options_.prefix_cache || !s.table.empty()) return;
  // Routing replay reads or sets the routing of every position: nothing may be skipped.
  if (s.spec.return_routed_experts || !s.spec.forced_experts.empty()) return;
  const int64_t bs = cache_.block_size();
  // At most the first n-1 tokens: the last one must be computed to give logits; and
  // none from the position before the first prompt logprob still wanted (its row gives it).
  int64_t max_blocks = (static_cast<int64_t>(s.tokens.size()) - 1) / bs;
  if (s.wants_prompt_logprobs()) max_blocks = std::min(max_blocks, (s.prompt_lp_next - 1) / bs);
  PagedKvCache::BlockKey parent = PagedKvCache::kRootKey;
  for (int64_t i = 0; i < max_blocks; ++i) {
    std::span<const int32_t> block(s.tokens.data() + i * bs, static_cast<size_t>(bs));
    std::optional<int32_t> hit = cache_.acquire_cached(parent, block);
    if (!hit) break;
    s.table.push_back(*hit);
    parent = PagedKvCache::block_key(parent, block);
    s.block_keys.push_back(parent);
  }
  s.cached = static_cast<int64_t>(s.table.size()) * bs;
  s.cached_tokens = std::min(s.cached, s.n_prompt);
}

void Scheduler::publish_blocks_locked(Sequence& s) {
  if (!options_.prefix_cache || s.kv_epoch != kv_epoch_) return;  // KV from before an invalidation
  if (!s.spec.forced_experts.empty()) return;  // KV of a forced routing is this request's own
  const int64_t bs = cache_.block_size();
  const int64_t full = std::min<int64_t>(s.cached / bs, static_cast<int64_t>(s.table.size()));
  for (int64_t i = static_cast<int64_t>(s.block_keys.size()); i < full; ++i) {
    const PagedKvCache::BlockKey parent = i == 0 ? PagedKvCache::kRootKey : s.block_keys.back();
    if (s.table[static_cast<size_t>(i)] < 0) break;  // given back (out of every window) unpublished
    std::span<const int32_t> block(s.tokens.data() + i * bs, static_cast<size_t>(bs));
    // Another request may have published the same content first; the chain goes on anyway.
    cache_.publish(s.table[static_cast<size_t>(i)], parent, block);
    s.block_keys.push_back(PagedKvCache::block_key(parent, block));
  }
}

// With a sliding window on every layer, a block that ends before the oldest position
// the next query can see is read by no layer again: it goes back to the pool (staying in
// the prefix cache when published) and its table entry becomes -1, which attention never
// reads (kernels/paged_attention.h). The next query sits at position s.cached.
void Scheduler::release_out_of_window_locked(Sequence& s) {
  if (window_ <= 0) return;
  const int64_t first_visible = s.cached - window_ + 1;
  const int64_t bs = cache_.block_size();
  for (int64_t b = 0; (b + 1) * bs <= first_visible && b < static_cast<int64_t>(s.table.size());
       ++b) {
    int32_t& block = s.table[static_cast<size_t>(b)];
    if (block < 0) continue;
    cache_.release(std::span<const int32_t>(&block, 1));
    block = -1;
  }
}

int64_t Scheduler::invalidate_prefix_cache_locked() {
  const int64_t dropped = cache_.drop_prefix_cache();
  ++kv_epoch_;
  ++counters_.prefix_invalidations;
  counters_.prefix_blocks_dropped += static_cast<uint64_t>(dropped);
  return dropped;
}

template <typename Queue>
void Scheduler::drop_cancelled_locked(Queue& queue) {
  for (auto it = queue.begin(); it != queue.end();) {
    if ((*it)->handle->cancelled()) {
      finish(**it, "abort");
      it = queue.erase(it);
    } else {
      ++it;
    }
  }
}

void Scheduler::abort_all_locked() {
  for (auto& s : running_) finish(*s, "abort");
  for (auto& s : waiting_) finish(*s, "abort");
  running_.clear();
  waiting_.clear();
}

void Scheduler::retract_all_locked(bool honour_restart) {
  // Back to the queue front in admission order, ahead of requests that never started.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    retract(**it, honour_restart && (*it)->spec.restart_on_retract);
    waiting_.push_front(std::move(*it));
  }
  running_.clear();
}

bool Scheduler::started_work_locked() const {
  if (!running_.empty()) return true;
  return std::any_of(waiting_.begin(), waiting_.end(),
                     [](const auto& s) { return s->generated() > 0; });
}

double Scheduler::run_exclusive(PauseMode mode, const std::function<void()>& fn) {
  std::unique_lock lock(mutex_);
  // One exclusive operation at a time.
  cv_.wait(lock, [&] { return !exclusive_ && !draining_; });
  if (mode == PauseMode::drain && !paused_) {
    draining_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !started_work_locked() || stop_; });
    draining_ = false;
  } else if (mode == PauseMode::abort) {
    exclusive_ = true;
    cv_.wait(lock, [&] { return !stepping_; });
    abort_all_locked();
  } else if (mode == PauseMode::retract) {
    exclusive_ = true;
    cv_.wait(lock, [&] { return !stepping_; });
    retract_all_locked(true);
  }
  exclusive_ = true;
  cv_.wait(lock, [&] { return !stepping_; });
  lock.unlock();
  const auto t0 = Clock::now();
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  lock.lock();
  exclusive_ = false;
  if (error)
    ++counters_.refit_failures;
  else {
    ++counters_.refits;
    counters_.refit_seconds += seconds;
  }
  // K/V computed with the old weights are stale: drop them now rather than at the next step.
  if (const uint64_t v = weight_version_(); v != cache_version_) {
    invalidate_prefix_cache_locked();
    cache_version_ = v;
  }
  lock.unlock();
  cv_.notify_all();
  if (error) std::rethrow_exception(error);
  return seconds;
}

void Scheduler::pause(PauseMode mode) {
  std::unique_lock lock(mutex_);
  if (mode == PauseMode::drain && !paused_) {
    // Stop admitting, let every started request finish, then pause (vLLM's /pause with
    // wait_for_inflight_requests). Requests that never started stay queued.
    cv_.wait(lock, [&] { return !exclusive_ && !draining_; });
    draining_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !started_work_locked() || stop_; });
    draining_ = false;
    cv_.notify_all();
  }
  paused_ = true;
  cv_.wait(lock, [&] { return !stepping_; });
  if (mode == PauseMode::abort)
    abort_all_locked();
  else if (mode == PauseMode::retract)
    retract_all_locked(true);
  // in_place: leave everything as it is.
}

void Scheduler::resume() {
  {
    std::lock_guard lock(mutex_);
    paused_ = false;
  }
  cv_.notify_all();
}

bool Scheduler::paused() const {
  std::lock_guard lock(mutex_);
  return paused_;
}

int64_t Scheduler::flush_cache() {
  std::lock_guard lock(mutex_);
  return invalidate_prefix_cache_locked();
}

int64_t Scheduler::unfinished() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(running_.size() + waiting_.size());
}

size_t Scheduler::release_kv_memory() {
  std::unique_lock lock(mutex_);
  if (!running_.empty())
    fail("{} requests are running; pause generation (or abort them) before releasing the KV cache",
         running_.size());
  const bool was = kv_released_;
  kv_released_ = true;  // no step starts from here on
  cv_.wait(lock, [&] { return !stepping_; });
  if (!running_.empty()) {
    kv_released_ = was;
    fail("{} requests are running; pause generation (or abort them) before releasing the KV cache",
         running_.size());
  }
  ++kv_epoch_;
  ++counters_.prefix_invalidations;
  counters_.prefix_blocks_dropped += static_cast<uint64_t>(cache_.stats().cached_blocks);
  return cache_.discard_memory();
}

void Scheduler::resume_kv_memory() {
  {
    std::lock_guard lock(mutex_);
    kv_released_ = false;
  }
  cv_.notify_all();
}

bool Scheduler::kv_released() const {
  std::lock_guard lock(mutex_);
  return kv_released_;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  SchedulerStats s = counters_;
  s.running = static_cast<int64_t>(running_.size());
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.kv = cache_.stats();
  s.paused = paused_;
  return s;
}

void Scheduler::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const bool can_run = !paused_ && !exclusive_ && !kv_released_ &&
                         (!running_.empty() || (!waiting_.empty() && !draining_));
    if (!can_run) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      // Cancelled requests leave even while nothing runs (an abort during a pause frees
      // their KV blocks now and lets a client waiting for an idle server see it), and the
      // queue timeout holds while generation is paused or held for an update.
      drop_cancelled_locked(running_);
      drop_expired_locked();
      continue;
    }
    lock.unlock();
    step();
    lock.lock();
  }
}

// A chunk gives a row per token when one of its positions predicts a prompt token whose
// logprob is still wanted.
bool Scheduler::wants_all_rows(const Sequence& s, int64_t n_new) {
  return s.wants_prompt_logprobs() && s.cached + n_new >= s.prompt_lp_next && s.cached < s.n_prompt;
}

// One step: admit, schedule, run, finish, in that order. The order is what batch invariance
// and the prefix cache rely on: what leaves, then what enters, then decode tokens before
// prompt chunks, then the results in the batch's order.
bool Scheduler::step() {
  // The weights' shared lock spans the whole step (lock order: weights, then mutex_): the
  // prefix lookups, the forward pass and the publishing of new blocks all see one version.
  std::shared_lock weights(weights_mutex_);
  std::unique_lock lock(mutex_);
  if (paused_ || exclusive_ || stop_ || kv_released_) return false;
  const uint64_t version = weight_version_();
  if (version != cache_version_) {  // committed outside run_exclusive (e.g. Engine::commit)
    invalidate_prefix_cache_locked();
    cache_version_ = version;
  }
  drop_expired_locked();
  admit_locked();
  const std::vector<StepWork> work = schedule_locked();
  if (work.empty()) return false;
  stepping_ = true;
  lock.unlock();

  std::string forward_error;
  const BatchForwardResult result = run_forward(work, forward_error);

  lock.lock();
  stepping_ = false;
  ++counters_.steps;
  finish_step_locked(work, result, forward_error, version);
  lock.unlock();
  weights.unlock();
  cv_.notify_all();
  return true;
}

// Cancelled requests leave, freeing their blocks; a request never admitted that waited too
// long (for KV-cache space, or while paused or updating) ends with a busy error.
void Scheduler::drop_expired_locked() {
  const auto now = Clock::now();
  drop_cancelled_locked(running_);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Sequence& s = **it;
    const double waited = std::chrono::duration<double>(now - s.queued_at).count();
    if (s.handle->cancelled()) {
      finish(s, "abort");
      it = waiting_.erase(it);
    } else if (waited > options_.queue_timeout_seconds && s.generated() == 0 &&
               !s.admitted_before) {
      const std::string why =
          paused_ || exclusive_ || kv_released_
              ? std::string(paused_      ? "while generation was paused"
                            : exclusive_ ? "while the weights were being updated"
                                         : "while the KV cache was released")
              : fmt::format("for KV-cache space ({} of {} blocks in use)",
                            cache_.stats().used_blocks, cache_.n_blocks());
      finish(s, "error",
             fmt::format("the request waited {:.0f} s (--queue-timeout {:g} s) {}; retry later",
                         waited, options_.queue_timeout_seconds, why),
             true);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

// Admission (FIFO): a request enters when the blocks of its whole known context fit
// (prompt plus tokens already generated before a retraction), keeping one block spare
// per running request for their next decode token.
void Scheduler::admit_locked() {
  while (!draining_ && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < options_.max_running) {
    Sequence& s = *waiting_.front();
    const int64_t n_tokens = static_cast<int64_t>(s.tokens.size());
    attach_cached_prefix_locked(s);  // shared blocks need no new ones
    const int64_t need = cache_.blocks_for(n_tokens + 1) - static_cast<int64_t>(s.table.size());
    const int64_t spare = static_cast<int64_t>(running_.size());
    if ((need + spare > cache_.free_blocks() && !running_.empty()) ||
        !cache_.reserve(s.table, n_tokens)) {
      detach_locked(s);  // hits go back to the cache
      break;
    }
    counters_.prefix_query_tokens += static_cast<uint64_t>(n_tokens);
    counters_.prefix_hit_tokens += static_cast<uint64_t>(s.cached);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

// Decode tokens first (one each), then prompt chunks within the token budget.
std::vector<Scheduler::StepWork> Scheduler::schedule_locked() {
  std::vector<StepWork> work;
  int64_t budget = options_.max_step_tokens;
  schedule_decodes_locked(work, budget);
  schedule_prompt_chunks_locked(work, budget);
  // Requests finished above (cache full) leave the running set.
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const auto& s) { return s->table.empty(); }),
                 running_.end());
  work.erase(std::remove_if(work.begin(), work.end(),
                            [](const StepWork& w) { return w.seq->table.empty(); }),
             work.end());
  return work;
}

void Scheduler::schedule_decodes_locked(std::vector<StepWork>& work, int64_t& budget) {
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = *running_[i];
    const int64_t pending = static_cast<int64_t>(s.tokens.size()) - s.cached;
    if (pending != 1) continue;
    // No block for its next token: preempt the newest request (recomputed later) until
    // one is free. When s is itself the newest it is the one preempted; only a request
    // running alone, whose context the whole pool cannot hold, ends with "length".
    bool preempted_self = false;
    while (!cache_.reserve(s.table, s.cached + 1)) {
      if (running_.size() <= 1) break;
      preempted_self = running_.back().get() == &s;
      retract(*running_.back(), false);
      waiting_.push_front(std::move(running_.back()));
      running_.pop_back();
      ++counters_.preemptions;
      if (preempted_self) break;
    }
    if (preempted_self) continue;  // it was running_.back(): the loop ends here
    if (static_cast<int64_t>(s.table.size()) < cache_.blocks_for(s.cached + 1)) {
      finish(s, "length");
      continue;
    }
    work.push_back({&s, 1, true});
    --budget;
  }
}

void Scheduler::schedule_prompt_chunks_locked(std::vector<StepWork>& work, int64_t& budget) {
  for (auto& sp : running_) {
    Sequence& s = *sp;
    const int64_t pending = static_cast<int64_t>(s.tokens.size()) - s.cached;
    if (pending <= 1 || budget <= 0) continue;
    const int64_t n = std::min(pending, budget);
    if (!cache_.reserve(s.table, s.cached + n)) continue;
    work.push_back({&s, n, n == pending});
    budget -= n;
  }
}

// The forward pass, outside the scheduler lock (submissions continue) but inside the
// weights' shared lock (a commit waits for the step to end). A failure is returned in
// `forward_error` (every request of the batch ends with it).
BatchForwardResult Scheduler::run_forward(const std::vector<StepWork>& work,
                                          std::string& forward_error) {
  std::vector<BatchSequence> batch;
  for (const StepWork& w : work) {
    BatchSequence b;
    b.tokens = std::span<const int32_t>(w.seq->tokens)
                   .subspan(static_cast<size_t>(w.seq->cached), static_cast<size_t>(w.n_new));
    b.start_pos = w.seq->cached;
    b.block_table = w.seq->table;
    const std::vector<int32_t>& forced = w.seq->spec.forced_experts;
    if (!forced.empty()) {
      const int64_t per = moe_routing_width(model_.config());
      const int64_t rows = static_cast<int64_t>(forced.size()) / per;
      const int64_t n = std::clamp<int64_t>(rows - w.seq->cached, 0, w.n_new);
      if (n > 0)
        b.forced_experts = std::span<const int32_t>(forced).subspan(
            static_cast<size_t>(w.seq->cached * per), static_cast<size_t>(n * per));
    }
    b.logits = wants_all_rows(*w.seq, w.n_new) ? LogitsWanted::all
               : w.sample                      ? LogitsWanted::last
                                               : LogitsWanted::none;
    batch.push_back(b);
  }
  BatchForwardResult result;
  try {
    result = forward_(batch, cache_);
  } catch (const std::exception& e) {
    forward_error = e.what();
  }
  return result;
}

namespace {

// Row r of the batch's logits.
std::span<const float> logits_row(const BatchForwardResult& result, int64_t r) {
  const int64_t V = result.logits.size(1);
  return std::span<const float>(result.logits.data<const float>() + r * V, static_cast<size_t>(V));
}

}  // namespace

// The step's results, in the batch's order: prompt logprobs, the new KV published to the
// prefix cache, a token drawn where the chunk ended the pending tokens; then the
// finished requests leave the batch.
void Scheduler::finish_step_locked(const std::vector<StepWork>& work,
                                   const BatchForwardResult& result,
                                   const std::string& forward_error, uint64_t version) {
  // The tokens first, in parallel: each draw reads only its own sequence's sampler, tokens
  // and logits row, none of which the loop below changes before the token is emitted, so
  // drawing ahead gives what drawing in the loop gave. A draw scores the whole vocabulary
  // in double (a row of 32000 took about 0.15 ms), which at 32 sequences was a tenth of a
  // serving step on one core while the others waited.
  std::vector<size_t> drawn;  // indices into work
  std::vector<TokenEvent> events(work.size());
  if (forward_error.empty()) {
    for (size_t i = 0; i < work.size(); ++i)
      if (work[i].sample && work[i].seq->spec.max_tokens != 0) drawn.push_back(i);
    if (draw_scratch_.size() < static_cast<size_t>(num_threads()))
      draw_scratch_.resize(static_cast<size_t>(num_threads()));
    parallel_for(
        static_cast<int64_t>(drawn.size()),
        [&](int64_t j0, int64_t j1, int participant) {
          for (int64_t j = j0; j < j1; ++j) {
            const size_t i = drawn[static_cast<size_t>(j)];
            Sequence& s = *work[i].seq;
            const int64_t last_row = wants_all_rows(s, work[i].n_new)
                                         ? result.first_row[i] + result.n_rows[i] - 1
                                         : result.first_row[i];
            events[i] = draw_token(s, logits_row(result, last_row), version,
                                   draw_scratch_[static_cast<size_t>(participant)]);
          }
        },
        1);
  }
  std::vector<double> values;
  std::vector<float> scaled;
  for (size_t i = 0; i < work.size(); ++i) {
    Sequence& s = *work[i].seq;
    if (!forward_error.empty()) {
      finish(s, "error", "forward pass failed: " + forward_error);
      s.table.clear();
      continue;
    }
    const bool all_rows = wants_all_rows(s, work[i].n_new);
    if (all_rows) report_prompt_logprobs(s, work[i].n_new, result, i, version, values, scaled);
    if (s.spec.return_routed_experts && result.routed_experts.defined()) {
      // Rows by position: a restarted request overwrites what its earlier run computed.
      const int64_t per = moe_routing_width(model_.config());
      const size_t end = static_cast<size_t>((s.cached + work[i].n_new) * per);
      if (s.routed.size() < end) s.routed.resize(end);
      const int32_t* from =
          result.routed_experts.data<const int32_t>() + result.first_token[i] * per;
      std::copy(from, from + work[i].n_new * per, s.routed.begin() + s.cached * per);
    }
    s.cached += work[i].n_new;
    publish_blocks_locked(s);
    release_out_of_window_locked(s);
    if (s.generated() == 0) counters_.prompt_tokens += static_cast<uint64_t>(work[i].n_new);
    if (!work[i].sample) continue;
    if (s.spec.max_tokens == 0) {
      finish(s, "length");
      continue;
    }
    emit_token_locked(s, std::move(events[i]));
  }
  // Finished requests (their table was released) leave the batch.
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const auto& s) { return s->table.empty() && s->cached == 0; }),
                 running_.end());
}

// The prompt logprobs a chunk's rows give (row j, position q = cached + j, predicts the
// token at q + 1), sent as one event.
void Scheduler::report_prompt_logprobs(Sequence& s, int64_t n_new, const BatchForwardResult& result,
                                       size_t index, uint64_t version, std::vector<double>& values,
                                       std::vector<float>& scaled) {
  const LogprobMode mode = s.spec.logprob_mode;
  // The sampler's temperature: one below its greedy epsilon is 0 there (dividing by 1e-38
  // would make every logprob inf or NaN).
  const float t = s.sampler->params().temperature;
  RequestHandle::Event pe = make_event(RequestHandle::Event::prompt);
  for (int64_t j = 0; j < n_new; ++j) {
    const int64_t q = s.cached + j;
    if (q + 1 < s.prompt_lp_next || q + 1 >= s.n_prompt) continue;
    std::span<const float> row = logits_row(result, result.first_row[index] + j);
    if (!reports_raw(mode) && t > 0 && t != 1) {
      scaled.assign(row.begin(), row.end());
      for (float& x : scaled) x /= t;
      row = scaled;
    }
    score_row(row, reports_logits(mode), {}, true, values);
    TokenEvent ev;
    ev.position = q + 1;
    ev.token = s.tokens[static_cast<size_t>(q + 1)];
    ev.logprob = static_cast<float>(values[static_cast<size_t>(ev.token)]);
    ev.rank = rank_of(values, ev.token);
    ev.weight_version = version;
    ev.top = top_of(values, s.spec.prompt_top_logprobs);
    pe.prompt_logprobs.push_back(std::move(ev));
    s.prompt_lp_next = q + 2;
  }
  if (!pe.prompt_logprobs.empty()) s.handle->push(std::move(pe));
}

// Draws the next token from the last row with its logprob, rank and top alternatives. Reads
// and changes only s's sampler (and `values`, scratch): safe beside other sequences' draws.
TokenEvent Scheduler::draw_token(Sequence& s, std::span<const float> row, uint64_t version,
                                 std::vector<double>& values) {
  // Stop tokens are banned until min_tokens are out (vLLM's and SGLang's min tokens).
  const bool ban = s.generated() < s.spec.min_tokens;
  std::span<const int32_t> output(s.tokens.data() + s.n_prompt, static_cast<size_t>(s.generated()));
  std::span<const float> processed = s.sampler->process(
      row, s.tokens, output,
      ban ? std::span<const int32_t>(s.spec.stop_tokens) : std::span<const int32_t>{});
  const int32_t token = s.sampler->draw(processed);
  TokenEvent ev;
  ev.token = token;
  ev.weight_version = version;
  ev.cached_tokens = s.cached_tokens;
  if (!s.spec.token_logprobs) {
    ev.logprob = std::numeric_limits<float>::quiet_NaN();
    return ev;
  }
  switch (s.spec.logprob_mode) {
    case LogprobMode::raw_logprobs:
      score_row(row, false, {}, true, values);
      break;
    case LogprobMode::raw_logits:
      score_row(row, true, {}, true, values);
      break;
    case LogprobMode::processed_logprobs:
      score_row(processed, false, s.sampler->kept(), s.sampler->kept_all(), values);
      break;
    case LogprobMode::processed_logits:
      score_row(processed, true, s.sampler->kept(), s.sampler->kept_all(), values);
      break;
    case LogprobMode::sglang:
      score_row(processed, false, {}, true, values);
      break;
  }
  ev.logprob = static_cast<float>(values[static_cast<size_t>(token)]);
  ev.rank = rank_of(values, token);
  ev.top = top_of(values, s.spec.top_logprobs);
  return ev;
}

// Appends the drawn token, reports it, and ends the request on a stop token or at its length.
void Scheduler::emit_token_locked(Sequence& s, TokenEvent ev) {
  const int32_t token = ev.token;
  s.tokens.push_back(token);
  ++counters_.generated_tokens;
  RequestHandle::Event te = make_event(RequestHandle::Event::token);
  te.token_event = std::move(ev);
  s.handle->push(std::move(te));
  const bool stop = std::find(s.spec.stop_tokens.begin(), s.spec.stop_tokens.end(), token) !=
                    s.spec.stop_tokens.end();
  if (stop)
    finish(s, "stop");
  else if (s.generated() >= s.spec.max_tokens ||
           static_cast<int64_t>(s.tokens.size()) >= model_.config().max_seq_len)
    finish(s, "length");
}

}  // namespace refit
