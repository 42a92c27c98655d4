// Reference definitions of the mixture-of-experts ops (kernels/ops.h), in double, written
// for clarity: what the CPU kernels are tested against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/reference.h"

namespace refit::cpu::reference {
namespace {

// Indices of the k largest scores, best first; a tie goes to the lower index.
std::vector<int64_t> best_k(const std::vector<double>& s, int64_t k) {
  std::vector<int64_t> order(s.size());
  for (size_t i = 0; i < s.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return s[size_t(a)] > s[size_t(b)]; });
  order.resize(static_cast<size_t>(k));
  return order;
}

}  // namespace

void moe_route(const Tensor& logits, int64_t k, ops::RouterScoring scoring, bool renormalize,
               Tensor& ids, Tensor& weights) {
  const int64_t T = logits.size(0), E = logits.size(1);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> l(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      l[size_t(e)] = logits.data<const float>()[t * logits.stride(0) + e];
    std::vector<double> score = l;
    if (scoring == ops::RouterScoring::softmax_topk) {
      const double mx = *std::max_element(l.begin(), l.end());
      double sum = 0;
      for (double& v : score) sum += v = std::exp(v - mx);
      for (double& v : score) v /= sum;
    }
    const std::vector<int64_t> chosen = best_k(score, k);
    std::vector<double> w(static_cast<size_t>(k));
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double s = score[size_t(chosen[size_t(j)])];
      w[size_t(j)] =
          scoring == ops::RouterScoring::softmax_topk ? s : std::exp(s - score[size_t(chosen[0])]);
      sum += w[size_t(j)];
    }
    const bool divide = scoring == ops::RouterScoring::topk_softmax || renormalize;
    for (int64_t j = 0; j < k; ++j) {
      ids.data<int32_t>()[t * ids.stride(0) + j] = static_cast<int32_t>(chosen[size_t(j)]);
      weights.data<float>()[t * weights.stride(0) + j] =
          static_cast<float>(divide ? w[size_t(j)] / sum : w[size_t(j)]);
    }
  }
}

void moe_combine(const Tensor& expert_out, const Tensor& weights, Tensor& out) {
  const int64_t T = expert_out.size(0), k = expert_out.size(1), D = expert_out.size(2);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0;
      for (int64_t j = 0; j < k; ++j)
        acc += double(weights.data<const float>()[t * weights.stride(0) + j]) *
               expert_out.data<const float>()[t * expert_out.stride(0) + j * expert_out.stride(1) +
                                              d * expert_out.stride(2)];
      out.data<float>()[t * out.stride(0) + d] = static_cast<float>(acc);
    }
}

void swiglu_oai_mul(const Tensor& gate, const Tensor& up, float alpha, float limit, Tensor& out) {
  const int64_t n = gate.numel();
  for (int64_t i = 0; i < n; ++i) {
    double g = gate.data<const float>()[i], u = up.data<const float>()[i];
    g = std::min(g, double(limit));
    u = std::max(-double(limit), std::min(u, double(limit)));
    out.data<float>()[i] = static_cast<float>((u + 1) * g / (1 + std::exp(-double(alpha) * g)));
  }
}

}  // namespace refit::cpu::reference
