// argmax's contract is the scalar loop `if (x[i] > x[best]) best = i` from best = 0: the
// first index of the largest value, NaN never chosen unless it sits at index 0, -0 and +0
// equal. The vectorised passes must give that loop's answer on every row, at every length
// (the 16-wide body and the scalar tail) and wherever the special values fall.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "runtime/sampler.h"

namespace refit {
namespace {

int32_t scalar_argmax(const std::vector<float>& x) {
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

TEST(RuntimeArgmax, matches_the_scalar_loop_on_ties_nans_signed_zeros_and_infinities) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {nan, inf, -inf, 0.0f, -0.0f, 1.0f, -1.0f};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, 9);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  int checked = 0;
  for (size_t n : {1, 2, 15, 16, 17, 31, 32, 33, 100, 1000}) {
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<float> x(n);
      // Few distinct values so that ties are common; specials sprinkled in.
      for (float& v : x) {
        const int p = pick(rng);
        v = p < 7 ? std::round(value(rng)) : specials[static_cast<size_t>(pick(rng)) % 7];
      }
      ASSERT_EQ(argmax(x), scalar_argmax(x)) << "n " << n << " trial " << trial;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3000);
  // The cases by name.
  EXPECT_EQ(argmax(std::vector<float>{nan, 5.0f, 7.0f}), 0);  // a NaN at 0 is never beaten
  EXPECT_EQ(argmax(std::vector<float>{1.0f, nan, 7.0f, nan}), 2);
  EXPECT_EQ(argmax(std::vector<float>{-0.0f, 0.0f}), 0);  // equal: the first stays
  EXPECT_EQ(argmax(std::vector<float>{-inf, -inf, -inf}), 0);
  std::vector<float> tie(40, 1.0f);
  tie[3] = tie[37] = 2.0f;
  EXPECT_EQ(argmax(tie), 3);
  EXPECT_EQ(argmax(std::vector<float>{}), 0);
}

}  // namespace
}  // namespace refit
