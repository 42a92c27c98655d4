// CPU kernels of the mixture-of-experts ops (kernels/ops.h): the router's top-k, the
// slot-ordered combine and gpt-oss's clamped SwiGLU. All are small next to the experts'
// matmuls, so they are plain loops in f32, one token (row) at a time, each row computed
// the same way whatever the other rows are (batch invariance).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace refit::cpu {
namespace {

// The k best of scores[0..E), best first, equal scores to the lower index.
void top_k(const float* scores, int64_t E, int64_t k, std::vector<int32_t>& chosen) {
  chosen.clear();
  std::vector<bool> taken(static_cast<size_t>(E), false);
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      if (taken[static_cast<size_t>(e)]) continue;
      // Strictly greater: the first (lowest) index keeps a tie. NaN never wins over a number.
      if (best < 0 || scores[e] > scores[best] ||
          (std::isnan(scores[best]) && !std::isnan(scores[e])))
        best = e;
    }
    taken[static_cast<size_t>(best)] = true;
    chosen.push_back(static_cast<int32_t>(best));
  }
}

}  // namespace

void moe_route_cpu(const Tensor& logits, int64_t k, ops::RouterScoring scoring, bool renormalize,
                   Tensor& ids, Tensor& weights) {
  const int64_t T = logits.size(0), E = logits.size(1);
  std::vector<float> p(static_cast<size_t>(E));
  std::vector<int32_t> chosen;
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.data<const float>() + t * logits.stride(0);
    int32_t* id = ids.data<int32_t>() + t * ids.stride(0);
    float* w = weights.data<float>() + t * weights.stride(0);
    if (scoring == ops::RouterScoring::softmax_topk) {
      float mx = l[0];
      for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
      float sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += p[static_cast<size_t>(e)] = std::exp(l[e] - mx);
      for (int64_t e = 0; e < E; ++e) p[static_cast<size_t>(e)] /= sum;
      top_k(p.data(), E, k, chosen);
      float chosen_sum = 0;
      for (int64_t j = 0; j < k; ++j) chosen_sum += p[static_cast<size_t>(chosen[j])];
      for (int64_t j = 0; j < k; ++j) {
        id[j] = chosen[static_cast<size_t>(j)];
        w[j] = renormalize ? p[static_cast<size_t>(id[j])] / chosen_sum
                           : p[static_cast<size_t>(id[j])];
      }
    } else {
      top_k(l, E, k, chosen);
      const float mx = l[chosen[0]];  // the best
      float sum = 0;
      for (int64_t j = 0; j < k; ++j)
        sum += w[j] = std::exp(l[chosen[static_cast<size_t>(j)]] - mx);
      for (int64_t j = 0; j < k; ++j) {
        id[j] = chosen[static_cast<size_t>(j)];
        w[j] /= sum;
      }
    }
  }
}

void moe_combine_cpu(const Tensor& expert_out, const Tensor& weights, Tensor& out) {
  const int64_t T = expert_out.size(0), k = expert_out.size(1), D = expert_out.size(2);
  for (int64_t t = 0; t < T; ++t) {
    float* o = out.data<float>() + t * out.stride(0);
    const float* w = weights.data<const float>() + t * weights.stride(0);
    std::fill(o, o + D, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float* y =
          expert_out.data<const float>() + t * expert_out.stride(0) + j * expert_out.stride(1);
      for (int64_t d = 0; d < D; ++d) o[d] += w[j] * y[d];
    }
  }
}

void swiglu_oai_mul_cpu(const Tensor& gate, const Tensor& up, float alpha, float limit,
                        Tensor& out) {
  const int64_t n = gate.numel();
  const float* g = gate.data<const float>();
  const float* u = up.data<const float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float gv = std::min(g[i], limit);  // NaN stays NaN, as torch.clamp
    const float uv = std::clamp(u[i], -limit, limit);
    const float glu = gv / (1.0f + std::exp(-alpha * gv));
    o[i] = (uv + 1.0f) * glu;
  }
}

}  // namespace refit::cpu
