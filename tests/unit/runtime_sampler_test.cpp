// The sampler's draws: without truncation they follow the softmax of the processed logits;
// with top-p or min-p (no top-k) the ids kept are those a sort of the whole vocabulary by
// logit keeps (the sampler orders only the ids that can survive); a seed repeats its draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "runtime/sampler.h"

namespace refit {
namespace {

std::vector<float> random_logits(size_t n, float spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// The ids top-p then min-p keep, by a full sort: (logit desc, id asc), p = exp(l - max) /
// sum over all ids in id order, the cuts as Sampler documents them.
std::vector<int32_t> reference_kept(const std::vector<float>& x, float top_p, float min_p) {
  const float mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float l : x) sum += std::exp(static_cast<double>(l - mx));
  std::vector<int32_t> ids(x.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return x[size_t(a)] != x[size_t(b)] ? x[size_t(a)] > x[size_t(b)] : a < b;
  });
  auto p = [&](size_t i) { return std::exp(static_cast<double>(x[size_t(ids[i])] - mx)) / sum; };
  size_t n = ids.size();
  if (top_p < 1.0f) {
    double cumulative = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      if ((cumulative += p(i)) >= top_p) {
        n = i + 1;
        break;
      }
  }
  if (min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && p(keep) >= p(0) * min_p) ++keep;
    n = keep;
  }
  ids.resize(n);
  return ids;
}

TEST(RuntimeSampler, untruncated_draws_follow_the_softmax) {
  const std::vector<float> x = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f, -INFINITY, 1.5f, -3.0f};
  double sum = 0;
  for (float l : x) sum += std::exp(static_cast<double>(l));
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 3;
  Sampler sampler(params);
  const int draws = 200000;
  std::vector<int> count(x.size());
  for (int i = 0; i < draws; ++i) {
    const int32_t id = sampler.draw(x);
    ASSERT_GE(id, 0);
    ASSERT_LT(id, static_cast<int32_t>(x.size()));
    ++count[size_t(id)];
    EXPECT_TRUE(sampler.kept_all());
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double p = std::exp(static_cast<double>(x[i])) / sum;
    const double sigma = std::sqrt(draws * p * (1 - p));
    EXPECT_NEAR(count[i], draws * p, 5 * sigma + 1) << "id " << i << " p " << p;
  }
  EXPECT_EQ(count[5], 0) << "a banned (-inf) id was drawn";
}

TEST(RuntimeSampler, top_p_and_min_p_keep_the_ids_a_full_sort_keeps) {
  int checked = 0;
  for (size_t n : {size_t{7}, size_t{1000}, size_t{40000}})
    for (float spread : {0.3f, 3.0f, 12.0f})  // flat to peaked
      for (auto [top_p, min_p] :
           {std::pair{0.9f, 0.0f}, std::pair{0.5f, 0.0f}, std::pair{0.999f, 0.0f},
            std::pair{1.0f, 0.05f}, std::pair{1.0f, 0.5f}, std::pair{0.8f, 0.1f}}) {
        std::vector<float> x = random_logits(n, spread, static_cast<uint32_t>(n + checked));
        x[n / 2] = -INFINITY;  // a banned id (a stop token before min_tokens)
        SamplingParams params;
        params.temperature = 1.0f;
        params.top_p = top_p;
        params.min_p = min_p;
        params.seed = 11;
        Sampler sampler(params);
        const int32_t id = sampler.draw(x);
        const std::vector<int32_t> want = reference_kept(x, top_p, min_p);
        SCOPED_TRACE(::testing::Message() << "n " << n << " spread " << spread << " top_p " << top_p
                                          << " min_p " << min_p);
        if (sampler.kept_all())
          ASSERT_EQ(want.size(), n);  // nothing cut
        else
          ASSERT_EQ(std::vector<int32_t>(sampler.kept().begin(), sampler.kept().end()), want);
        EXPECT_NE(std::find(want.begin(), want.end(), id), want.end()) << "drew a cut id";
        ++checked;
      }
  EXPECT_EQ(checked, 54);
}

TEST(RuntimeSampler, a_seed_repeats_its_draws_and_another_seed_does_not) {
  const std::vector<float> x = random_logits(5000, 2.0f, 1);
  auto run = [&](uint64_t seed, float top_p) {
    SamplingParams params;
    params.temperature = 0.8f;
    params.top_p = top_p;
    params.seed = seed;
    Sampler sampler(params);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(sampler.draw(x));
    return out;
  };
  for (float top_p : {1.0f, 0.9f}) {
    EXPECT_EQ(run(5, top_p), run(5, top_p));
    EXPECT_NE(run(5, top_p), run(6, top_p));
  }
}

}  // namespace
}  // namespace refit
