// Prefix cache: full KV blocks shared between requests with a common prefix (hash chain
// over block contents, reference counts, LRU eviction of unreferenced cached blocks),
// invalidated by a weight update whatever path commits it, and bitwise neutral: a request
// with a cache hit yields the logits, tokens and logprobs of the same request run cold.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"
#include "models/model.h"
#include "runtime/scheduler.h"
#include "serve_test_model.h"

namespace refit {
namespace {

using namespace std::chrono_literals;

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

PagedKvCacheOptions tiny(int64_t n_blocks) {
  PagedKvCacheOptions o;
  o.n_layers = 1;
  o.n_kv_heads = 1;
  o.head_dim = 4;
  o.block_size = 4;
  o.n_blocks = n_blocks;
  return o;
}

TEST(ServePrefixCache, published_blocks_are_found_by_content_chain_shared_parked_and_evicted_lru) {
  PagedKvCache cache(tiny(4));
  using Key = PagedKvCache::BlockKey;
  const std::vector<int32_t> t0{1, 2, 3, 4}, t1{5, 6, 7, 8}, t2{9, 9, 9, 9};
  std::vector<int32_t> a = *cache.allocate(2);
  EXPECT_TRUE(cache.publish(a[0], PagedKvCache::kRootKey, t0));
  const Key k0 = PagedKvCache::block_key(PagedKvCache::kRootKey, t0);
  EXPECT_TRUE(cache.publish(a[1], k0, t1));
  EXPECT_FALSE(cache.publish(a[1], k0, t1));  // already published
  EXPECT_EQ(cache.stats().cached_blocks, 2);
  // Found only under the same parent and the same tokens.
  EXPECT_EQ(cache.acquire_cached(PagedKvCache::kRootKey, t0), a[0]);
  EXPECT_EQ(cache.ref_count(a[0]), 2);
  EXPECT_FALSE(cache.acquire_cached(PagedKvCache::kRootKey, t1));  // right tokens, wrong parent
  EXPECT_FALSE(cache.acquire_cached(k0, t2));
  EXPECT_FALSE(cache.acquire_cached(PagedKvCache::kRootKey,
                                    std::vector<int32_t>{1, 2, 3}));  // not a full block
  // Released to zero: parked (still findable), counted as free for allocation.
  cache.release(a);
  cache.release(std::span<const int32_t>(&a[0], 1));
  PagedKvCacheStats s = cache.stats();
  EXPECT_EQ(s.used_blocks, 0);
  EXPECT_EQ(s.free_blocks, 4);
  EXPECT_EQ(s.evictable_blocks, 2);
  EXPECT_EQ(s.cached_blocks, 2);
  // Never-used blocks go first; then the least recently released cached block: a[1]
  // reached zero in the first release, a[0] in the second.
  std::vector<int32_t> fresh = *cache.allocate(2);
  EXPECT_TRUE(std::find(fresh.begin(), fresh.end(), a[0]) == fresh.end());
  EXPECT_EQ(cache.stats().cached_blocks, 2);
  std::vector<int32_t> evicted = *cache.allocate(1);
  EXPECT_EQ(evicted[0], a[1]);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_FALSE(cache.acquire_cached(k0, t1));                         // its key went with it
  EXPECT_EQ(cache.acquire_cached(PagedKvCache::kRootKey, t0), a[0]);  // the other survives
  EXPECT_FALSE(cache.allocate(1));  // a[0] is referenced again: nothing left
  // Dropping the cache forgets every key; referenced blocks are freed normally later.
  EXPECT_EQ(cache.drop_prefix_cache(), 1);
  EXPECT_FALSE(cache.is_cached(a[0]));
  cache.release(std::span<const int32_t>(&a[0], 1));
  EXPECT_EQ(cache.free_blocks(), 1);
  EXPECT_EQ(cache.stats().evictable_blocks, 0);
  // Only full, referenced blocks are published.
  EXPECT_THROW(cache.publish(a[0], PagedKvCache::kRootKey, t0), Error);  // free
  EXPECT_THROW(cache.publish(fresh[0], PagedKvCache::kRootKey, std::vector<int32_t>{1, 2}), Error);
}

// The kernel-level guarantee the scheduler relies on: a sequence whose first blocks are
// another sequence's (computed in another batch, at another time) gets bitwise the logits
// it gets computing everything itself.
TEST(ServePrefixCache, logits_after_a_shared_prefix_are_bitwise_those_of_a_cold_run) {
  const ModelConfig c = testing::serve_test_config();
  auto model = testing::serve_test_model(c, DType::f32);
  const std::vector<int32_t> prefix = random_tokens(32, 11, c.vocab_size);
  const std::vector<int32_t> a = concat(prefix, random_tokens(9, 12, c.vocab_size));
  const std::vector<int32_t> b = concat(prefix, random_tokens(13, 13, c.vocab_size));
  auto run = [&](PagedKvCache& cache, std::span<const int32_t> tokens, int64_t start,
                 std::vector<int32_t>& table) {
    EXPECT_TRUE(cache.reserve(table, start + static_cast<int64_t>(tokens.size())));
    BatchSequence s{tokens, start, table, LogitsWanted::all, {}};
    return batched_forward(*model, std::span<const BatchSequence>(&s, 1), cache).logits;
  };
  // Cold: b alone in a fresh cache.
  PagedKvCache cold_cache = make_paged_cache(*model, 16, 16);
  std::vector<int32_t> cold_table;
  const Tensor cold = run(cold_cache, b, 0, cold_table);
  // Warm: a computes the prefix blocks; b borrows them and computes only its tail.
  PagedKvCache cache = make_paged_cache(*model, 16, 16);
  std::vector<int32_t> a_table;
  run(cache, a, 0, a_table);
  std::vector<int32_t> b_table{a_table[0], a_table[1]};
  const Tensor warm = run(cache, std::span<const int32_t>(b).subspan(32), 32, b_table);
  const int64_t V = c.vocab_size, tail = static_cast<int64_t>(b.size()) - 32;
  ASSERT_EQ(warm.size(0), tail);
  EXPECT_EQ(0, std::memcmp(warm.data<const float>(), cold.data<const float>() + 32 * V,
                           static_cast<size_t>(tail * V) * sizeof(float)));
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  std::vector<uint64_t> versions;
  std::string finish_reason;
};

// Reads events into `o` until the request finishes (wait > 0) or none is pending (wait 0).
void add_token(Outcome& o, const RequestHandle::Event& e) {
  o.tokens.push_back(e.token_event.token);
  o.logprobs.push_back(e.token_event.logprob);
  o.top.push_back(e.token_event.top);
  o.versions.push_back(e.token_event.weight_version);
}

void read_events(RequestHandle& h, Outcome& o, std::chrono::milliseconds wait) {
  RequestHandle::Event e;
  while (h.next(e, wait)) {
    if (e.kind == RequestHandle::Event::token) {
      add_token(o, e);
    } else if (e.kind == RequestHandle::Event::finished) {
      o.finish_reason = e.finish_reason;
      return;
    }
  }
  if (wait.count() > 0) o.finish_reason = "timeout";
}

Outcome collect(RequestHandle& h) {
  Outcome o;
  read_events(h, o, 30s);
  return o;
}

void expect_bitwise(const Outcome& got, const Outcome& want) {
  EXPECT_EQ(got.finish_reason, want.finish_reason);
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  EXPECT_EQ(0, std::memcmp(got.logprobs.data(), want.logprobs.data(),
                           want.logprobs.size() * sizeof(float)));
  ASSERT_EQ(got.top.size(), want.top.size());
  for (size_t i = 0; i < want.top.size(); ++i) {
    ASSERT_EQ(got.top[i].size(), want.top[i].size());
    for (size_t j = 0; j < want.top[i].size(); ++j) {
      EXPECT_EQ(got.top[i][j].token, want.top[i][j].token);
      EXPECT_EQ(0, std::memcmp(&got.top[i][j].logprob, &want.top[i][j].logprob, sizeof(float)));
    }
  }
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

class ServePrefixScheduler : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::serve_test_config();
    model_ = testing::serve_test_model(config_, DType::f32);
  }
  std::unique_ptr<Scheduler> make(bool prefix_cache, int64_t kv_blocks = 0) {
    SchedulerOptions o;
    o.prefix_cache = prefix_cache;
    o.kv_blocks = kv_blocks;
    return std::make_unique<Scheduler>(
        *model_, mutex_, [this] { return version_.load(); }, o);
  }
  RequestSpec greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
    RequestSpec s;
    s.prompt = std::move(prompt);
    s.max_tokens = max_tokens;
    s.top_logprobs = 5;
    return s;
  }
  Outcome cold(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    return collect(*make(false)->submit(greedy(prompt, max_tokens)));
  }
  ModelConfig config_;
  std::unique_ptr<Model> model_;
  std::shared_mutex mutex_;
  std::atomic<uint64_t> version_{1};
};

TEST_F(ServePrefixScheduler,
       requests_with_a_common_prefix_share_blocks_and_match_cold_runs_bitwise) {
  const std::vector<int32_t> prefix =
      random_tokens(32, 21, config_.vocab_size);  // two blocks of 16
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 6; ++i)
    prompts.push_back(concat(prefix, random_tokens(3 + 5 * i, 30 + i, config_.vocab_size)));
  std::vector<Outcome> want;
  for (const auto& p : prompts) want.push_back(cold(p, 12));

  auto sched = make(true);
  // The first request computes and publishes the prefix blocks.
  expect_bitwise(collect(*sched->submit(greedy(prompts[0], 12))), want[0]);
  SchedulerStats s = sched->stats();
  EXPECT_EQ(s.prefix_hit_tokens, 0u);
  EXPECT_GE(s.kv.cached_blocks, 2);
  EXPECT_EQ(s.kv.used_blocks, 0);  // cached but unreferenced
  // Two requests at once: while both run they hold the same two prefix blocks.
  const std::vector<int32_t> p1 = concat(prefix, random_tokens(3, 90, config_.vocab_size));
  const std::vector<int32_t> p2 = concat(prefix, random_tokens(8, 91, config_.vocab_size));
  auto h1 = sched->submit(greedy(p1, 200));
  auto h2 = sched->submit(greedy(p2, 200));
  Outcome o1, o2;
  // Wait until both have sampled a token (on a loaded machine the second may be admitted a
  // step later), then pause with both mid-generation.
  RequestHandle::Event e;
  ASSERT_TRUE(h1->next(e, 10s));
  ASSERT_EQ(e.kind, RequestHandle::Event::token);
  add_token(o1, e);
  ASSERT_TRUE(h2->next(e, 10s));
  ASSERT_EQ(e.kind, RequestHandle::Event::token);
  add_token(o2, e);
  sched->pause(PauseMode::in_place);
  read_events(*h1, o1, 0ms);  // every token sampled before the pause
  read_events(*h2, o2, 0ms);
  ASSERT_TRUE(o1.finish_reason.empty() && o2.finish_reason.empty()) << "finished before the pause";
  s = sched->stats();
  EXPECT_EQ(s.prefix_hit_tokens, 64u);  // 32 each
  // After a step a request with ctx tokens holds blocks for its ctx-1 cached positions;
  // two of those blocks are shared.
  auto held = [](size_t prompt, size_t generated) {
    return static_cast<int64_t>((prompt + generated - 1 + 15) / 16);
  };
  EXPECT_EQ(s.kv.used_blocks,
            held(p1.size(), o1.tokens.size()) + held(p2.size(), o2.tokens.size()) - 2);
  sched->resume();
  read_events(*h1, o1, 30s);
  read_events(*h2, o2, 30s);
  expect_bitwise(o1, cold(p1, 200));
  expect_bitwise(o2, cold(p2, 200));
  // The rest concurrently, under load: every one hits and every one is bitwise cold.
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (size_t i = 3; i < prompts.size(); ++i) hs.push_back(sched->submit(greedy(prompts[i], 12)));
  for (size_t i = 3; i < prompts.size(); ++i) expect_bitwise(collect(*hs[i - 3]), want[i]);
  EXPECT_EQ(sched->stats().prefix_hit_tokens, 64u + 32u * 3);
  EXPECT_EQ(sched->stats().kv.used_blocks, 0);
  // A prompt that is exactly the cached blocks still computes its last token.
  expect_bitwise(collect(*sched->submit(greedy(prefix, 5))), cold(prefix, 5));
}

TEST_F(ServePrefixScheduler,
       a_weight_update_by_any_path_drops_stale_blocks_and_requests_match_fresh_runs) {
  const std::vector<int32_t> prompt = random_tokens(50, 41, config_.vocab_size);
  const Outcome v1 = cold(prompt, 10);
  auto sched = make(true);
  expect_bitwise(collect(*sched->submit(greedy(prompt, 10))), v1);
  expect_bitwise(collect(*sched->submit(greedy(prompt, 10))), v1);  // a hit on v1 blocks
  EXPECT_EQ(sched->stats().prefix_hit_tokens, 48u);
  ASSERT_GE(sched->stats().kv.cached_blocks, 3);

  // Through the scheduler (the HTTP endpoints' path): dropped at once.
  sched->run_exclusive(PauseMode::drain, [&] {
    std::unique_lock lock(mutex_);
    load_seed(*model_, 2);
    ++version_;
  });
  EXPECT_EQ(sched->stats().kv.cached_blocks, 0);
  EXPECT_GE(sched->stats().prefix_blocks_dropped, 3u);
  const Outcome v2 = cold(prompt, 10);
  ASSERT_NE(v2.tokens, v1.tokens);
  Outcome got = collect(*sched->submit(greedy(prompt, 10)));
  expect_bitwise(got, v2);
  EXPECT_EQ(got.versions, std::vector<uint64_t>(10, 2));
  EXPECT_EQ(sched->stats().prefix_hit_tokens, 48u);                 // recomputed, no hit
  expect_bitwise(collect(*sched->submit(greedy(prompt, 10))), v2);  // v2 blocks hit
  EXPECT_EQ(sched->stats().prefix_hit_tokens, 96u);

  // A commit the scheduler is not told about (an Engine transaction from elsewhere):
  // the next step sees the version change before it looks anything up.
  {
    std::unique_lock lock(mutex_);
    load_seed(*model_, 3);
    ++version_;
  }
  const Outcome v3 = cold(prompt, 10);
  got = collect(*sched->submit(greedy(prompt, 10)));
  expect_bitwise(got, v3);
  EXPECT_EQ(got.versions, std::vector<uint64_t>(10, 3));
  EXPECT_EQ(sched->stats().prefix_hit_tokens, 96u);

  // A failed update keeps the cache (the weights did not change).
  const int64_t cached = sched->stats().kv.cached_blocks;
  EXPECT_THROW(sched->run_exclusive(PauseMode::drain, [] { fail("wrong shape"); }), Error);
  EXPECT_EQ(sched->stats().kv.cached_blocks, cached);
  // /flush_cache: everything goes, the next request recomputes.
  EXPECT_EQ(sched->flush_cache(), cached);
  EXPECT_EQ(sched->stats().kv.cached_blocks, 0);
  expect_bitwise(collect(*sched->submit(greedy(prompt, 10))), v3);
  EXPECT_EQ(sched->stats().prefix_hit_tokens, 96u);
}

TEST_F(ServePrefixScheduler, cached_blocks_are_evicted_under_pressure_and_results_stay_exact) {
  // 8 blocks of 16 = 128 tokens of KV.
  const std::vector<int32_t> a = random_tokens(40, 51, config_.vocab_size);
  const std::vector<int32_t> big = random_tokens(100, 52, config_.vocab_size);
  const Outcome want_a = cold(a, 8), want_big = cold(big, 27);
  auto sched = make(true, 8);
  expect_bitwise(collect(*sched->submit(greedy(a, 8))), want_a);
  ASSERT_GE(sched->stats().kv.cached_blocks, 2);
  // 127 positions need all 8 blocks: a's cached blocks must be evicted for it.
  expect_bitwise(collect(*sched->submit(greedy(big, 27))), want_big);
  const SchedulerStats s = sched->stats();
  EXPECT_GE(s.kv.evictions, 2u);
  EXPECT_EQ(s.kv.used_blocks, 0);
  // a again: its blocks are gone (or partly), the result is exact either way.
  expect_bitwise(collect(*sched->submit(greedy(a, 8))), want_a);
  // Many different prompts through a small pool: the pool never leaks blocks.
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (uint32_t i = 0; i < 10; ++i)
    hs.push_back(sched->submit(greedy(random_tokens(20 + i, 60 + i, config_.vocab_size), 6)));
  for (auto& h : hs) EXPECT_EQ(collect(*h).finish_reason, "length");
  EXPECT_EQ(sched->stats().kv.used_blocks, 0);
  EXPECT_LE(sched->stats().kv.cached_blocks, 8);
}

}  // namespace
}  // namespace refit
