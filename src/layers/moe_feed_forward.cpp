#include "layers/moe_feed_forward.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace refit {
namespace {

// Sub-shards of a stacked parameter: per expert, `parts` checkpoint tensors of `rows` rows
// each (gate then up, or down alone), whole tensors (replicated), one after another.
std::vector<SubShard> expert_shards(const std::vector<std::vector<std::string>>& parts,
                                    int64_t n_experts, int64_t rows, Shape tail) {
  std::vector<SubShard> shards;
  int64_t offset = 0;
  for (int64_t e = 0; e < n_experts; ++e)
    for (const std::vector<std::string>& names : parts) {
      Shape shape{rows};
      shape.insert(shape.end(), tail.begin(), tail.end());
      shards.push_back({names[static_cast<size_t>(e)], shape, -1, 0, 0, offset, rows});
      offset += rows;
    }
  return shards;
}

// The router's weights for experts `id` (k of them, slot order) of one token, computed as
// ops::moe_route's CPU kernel computes them for the experts it picks (same operations in
// the same order), so forcing its own choice gives its own weights bitwise.
void forced_weights(const float* l, int64_t E, const int32_t* id, int64_t k,
                    ops::RouterScoring scoring, bool renormalize, float* w) {
  if (scoring == ops::RouterScoring::softmax_topk) {
    float mx = l[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    std::vector<float> p(static_cast<size_t>(E));
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += p[static_cast<size_t>(e)] = std::exp(l[e] - mx);
    for (int64_t e = 0; e < E; ++e) p[static_cast<size_t>(e)] /= sum;
    float chosen_sum = 0;
    for (int64_t j = 0; j < k; ++j) chosen_sum += p[static_cast<size_t>(id[j])];
    for (int64_t j = 0; j < k; ++j)
      w[j] =
          renormalize ? p[static_cast<size_t>(id[j])] / chosen_sum : p[static_cast<size_t>(id[j])];
  } else {
    const float mx = l[id[0]];
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += w[j] = std::exp(l[id[j]] - mx);
    for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
}

}  // namespace

MoeFeedForward::MoeFeedForward(ParameterSet& params, const MoeSpec& s, DType weight_dtype,
                               const TensorParallel& tp)
    : spec_(s) {
  if (tp.world() > 1)
    fail("{}: mixture-of-experts layers do not run under tensor parallelism yet", s.gate_up_name);
  const size_t E = static_cast<size_t>(s.n_experts);
  if (s.n_experts <= 0 || s.n_used <= 0 || s.n_used > s.n_experts || s.hidden <= 0)
    fail("{}: {} experts, {} used, width {} do not make a mixture of experts", s.gate_up_name,
         s.n_experts, s.n_used, s.hidden);
  if (s.gate.size() != E || s.up.size() != E || s.down.size() != E)
    fail("{}: expert names for {} experts expected", s.gate_up_name, E);
  const bool biases = !s.gate_bias.empty();
  // The router stays f32 whatever the checkpoint or --quant: its logits choose experts,
  // and a small error there flips a choice (llama.cpp never quantizes it either).
  router_ = &params.add(s.router, {s.n_experts, s.dim}, DType::f32);
  if (!s.router_bias.empty()) router_bias_ = &params.add(s.router_bias, {s.n_experts}, DType::f32);
  const int64_t I = s.hidden, E64 = s.n_experts;
  gate_up_ = &params.add(
      std::make_unique<Parameter>(s.gate_up_name, Shape{E64 * 2 * I, s.dim}, weight_dtype,
                                  expert_shards({s.gate, s.up}, E64, I, {s.dim})));
  down_ = &params.add(std::make_unique<Parameter>(s.down_name, Shape{E64 * s.dim, I}, weight_dtype,
                                                  expert_shards({s.down}, E64, s.dim, {I})));
  if (biases) {
    gate_up_bias_ = &params.add(
        std::make_unique<Parameter>(s.gate_up_bias_name, Shape{E64 * 2 * I}, DType::f32,
                                    expert_shards({s.gate_bias, s.up_bias}, E64, I, {})));
    down_bias_ =
        &params.add(std::make_unique<Parameter>(s.down_bias_name, Shape{E64 * s.dim}, DType::f32,
                                                expert_shards({s.down_bias}, E64, s.dim, {})));
  }
}

Tensor MoeFeedForward::forward(const Tensor& x, const MoeRouting& routing) const {
  const int64_t T = x.size(0), E = spec_.n_experts, k = spec_.n_used, D = spec_.dim,
                I = spec_.hidden;
  Tensor logits = Tensor::empty({T, E}, DType::f32);
  matmul_weight(x, *router_, router_bias_ ? router_bias_->data() : Tensor(), logits);
  Tensor ids = Tensor::empty({T, k}, DType::i32), weights = Tensor::empty({T, k}, DType::f32);
  ops::moe_route(logits, k, spec_.scoring, spec_.renormalize, ids, weights);
  if (routing.forced.defined()) {
    const Tensor& f = routing.forced;
    if (f.dtype() != DType::i32 || f.dim() != 2 || f.size(0) != T || f.size(1) != k)
      fail("{}: forced routing {} for {} tokens of {} experts each", spec_.gate_up_name, f.str(), T,
           k);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* want = f.data<const int32_t>() + t * f.stride(0);
      if (want[0] < 0) continue;
      int32_t* id = ids.data<int32_t>() + t * k;
      for (int64_t j = 0; j < k; ++j) {
        if (want[j] < 0 || want[j] >= E)
          fail("{}: forced expert {} of token {} is not one of the {} experts", spec_.gate_up_name,
               want[j], t, E);
        for (int64_t i = 0; i < j; ++i)
          if (want[i] == want[j])
            fail("{}: token {} is forced to expert {} twice", spec_.gate_up_name, t, want[j]);
        id[j] = want[j];
      }
      forced_weights(logits.data<const float>() + t * E, E, id, k, spec_.scoring, spec_.renormalize,
                     weights.data<float>() + t * k);
    }
  }
  if (routing.chosen.defined())
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j)
        routing.chosen
            .data<int32_t>()[t * routing.chosen.stride(0) + j * routing.chosen.stride(1)] =
            ids.data<const int32_t>()[t * k + j];

  // Per expert, the slots (t·k + j) that chose it, in token order.
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(E));
  const int32_t* id = ids.data<const int32_t>();
  for (int64_t s = 0; s < T * k; ++s) slots[static_cast<size_t>(id[s])].push_back(s);

  Tensor expert_out = Tensor::empty({T, k, D}, DType::f32);
  Tensor by_slot = expert_out.view({T * k, D});
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<int64_t>& mine = slots[static_cast<size_t>(e)];
    const int64_t n = static_cast<int64_t>(mine.size());
    if (n == 0) continue;
    Tensor xe = Tensor::empty({n, D}, DType::f32);
    for (int64_t i = 0; i < n; ++i) xe.select(0, i).copy_from(x.select(0, mine[size_t(i)] / k));
    Tensor gu = Tensor::empty({n, 2 * I}, DType::f32);
    matmul_weight_rows(xe, *gate_up_, e * 2 * I, 2 * I,
                       gate_up_bias_ ? gate_up_bias_->data().narrow(0, e * 2 * I, 2 * I) : Tensor(),
                       gu);
    Tensor gate = gu.narrow(1, 0, I).contiguous(), up = gu.narrow(1, I, I).contiguous();
    if (spec_.activation == ExpertActivation::silu)
      ops::silu_mul(gate, up, gate);
    else
      ops::swiglu_oai_mul(gate, up, spec_.swiglu_alpha, spec_.swiglu_limit, gate);
    Tensor ye = Tensor::empty({n, D}, DType::f32);
    matmul_weight_rows(gate, *down_, e * D, D,
                       down_bias_ ? down_bias_->data().narrow(0, e * D, D) : Tensor(), ye);
    for (int64_t i = 0; i < n; ++i) by_slot.select(0, mine[size_t(i)]).copy_from(ye.select(0, i));
  }
  Tensor out = Tensor::empty({T, D}, DType::f32);
  ops::moe_combine(expert_out, weights, out);
  return out;
}

}  // namespace refit
