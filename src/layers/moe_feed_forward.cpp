#include "layers/moe_feed_forward.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"

namespace refit {
namespace {

// `units` split over `world` ranks as evenly as they go (the first units % world ranks one
// more): {first, count} for `rank`. Uneven, as vLLM splits gpt-oss's 90 blocks of 32 over 4.
std::pair<int64_t, int64_t> split_uneven(int64_t units, int64_t rank, int64_t world) {
  const int64_t base = units / world, extra = units % world;
  return {rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

// Sub-shards of a stacked parameter: for each of this rank's experts, one per checkpoint
// tensor in `parts` (gate then up, or down alone), each `rows` rows of the full tensor
// [rows, tail...] sliced along `split_dim` to [start, start + length) (-1: whole), one
// after another.
struct PartSlice {
  int64_t split_dim = -1, start = 0, length = 0;
};
std::vector<SubShard> expert_shards(const std::vector<std::vector<std::string>>& parts,
                                    int64_t first_expert, int64_t n_experts, Shape full,
                                    PartSlice slice) {
  std::vector<SubShard> shards;
  int64_t offset = 0;
  const int64_t local_rows = slice.split_dim == 0 ? slice.length : full[0];
  for (int64_t e = first_expert; e < first_expert + n_experts; ++e)
    for (const std::vector<std::string>& names : parts) {
      shards.push_back({names[static_cast<size_t>(e)], full, slice.split_dim, slice.start,
                        slice.length, offset, local_rows});
      offset += local_rows;
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
    : spec_(s), communicator_(tp.communicator) {
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
  const int64_t I = s.hidden, D = s.dim, rank = tp.rank(), world = tp.world();
  // What this rank holds: whole experts (expert parallelism), or of every expert a slice of
  // its I rows of gate/up and columns of down, in blocks of 32 where I allows (MXFP4 and
  // Q8_0 scale 32 values of down's K), the ranks' shares as even as the blocks go.
  PartSlice rows, cols, bias_rows;
  if (world > 1 && tp.expert_parallel) {
    std::tie(first_expert_, local_experts_) = split_uneven(s.n_experts, rank, world);
    if (local_experts_ == 0)
      fail("{}: {} experts cannot be spread over {} ranks (--ep)", s.gate_up_name, s.n_experts,
           world);
    for (int64_t e = 0; e < s.n_experts; ++e) {  // the other ranks' experts
      if (e >= first_expert_ && e < first_expert_ + local_experts_) continue;
      for (const auto* names : {&s.gate, &s.up, &s.down, &s.gate_bias, &s.up_bias, &s.down_bias})
        if (!names->empty()) params.add_elsewhere((*names)[static_cast<size_t>(e)]);
    }
  } else {
    local_experts_ = s.n_experts;
    if (world > 1) {
      const int64_t unit = I % 32 == 0 ? 32 : 1;
      auto [first, count] = split_uneven(I / unit, rank, world);
      if (count == 0)
        fail("{}: an expert width of {} cannot be split over {} ranks", s.gate_up_name, I, world);
      i0_ = first * unit, local_i_ = count * unit;
      rows = {0, i0_, local_i_};
      cols = {1, i0_, local_i_};
      bias_rows = rows;
    }
  }
  if (local_i_ == 0) local_i_ = I;
  const int64_t Ie = local_i_, El = local_experts_;
  gate_up_ = &params.add(std::make_unique<Parameter>(
      s.gate_up_name, Shape{El * 2 * Ie, D}, weight_dtype,
      expert_shards({s.gate, s.up}, first_expert_, El, {I, D}, rows), rank, world));
  down_ = &params.add(std::make_unique<Parameter>(
      s.down_name, Shape{El * D, Ie}, weight_dtype,
      expert_shards({s.down}, first_expert_, El, {D, I}, cols), rank, world));
  if (biases) {
    gate_up_bias_ = &params.add(std::make_unique<Parameter>(
        s.gate_up_bias_name, Shape{El * 2 * Ie}, DType::f32,
        expert_shards({s.gate_bias, s.up_bias}, first_expert_, El, {I}, bias_rows), rank, world));
    // Whole on every rank that has the expert; under a split of I it is added on rank 0
    // only (the other ranks' partial sums must not carry it again).
    down_bias_ = &params.add(std::make_unique<Parameter>(
        s.down_bias_name, Shape{El * D}, DType::f32,
        expert_shards({s.down_bias}, first_expert_, El, {D}, {}), rank, world));
    add_down_bias_ = tp.expert_parallel || rank == 0;
  }
}

Tensor MoeFeedForward::forward(const Tensor& x, const MoeRouting& routing) const {
  const int64_t T = x.size(0), E = spec_.n_experts, k = spec_.n_used, D = spec_.dim, I = local_i_;
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

  // Slots routed to another rank's experts (expert parallelism) contribute zero here.
  Tensor expert_out = local_experts_ < E ? Tensor::zeros({T, k, D}, DType::f32)
                                         : Tensor::empty({T, k, D}, DType::f32);
  Tensor by_slot = expert_out.view({T * k, D});
  for (int64_t le = 0; le < local_experts_; ++le) {
    const int64_t e = first_expert_ + le;
    const std::vector<int64_t>& mine = slots[static_cast<size_t>(e)];
    const int64_t n = static_cast<int64_t>(mine.size());
    if (n == 0) continue;
    Tensor xe = Tensor::empty({n, D}, DType::f32);
    for (int64_t i = 0; i < n; ++i) xe.select(0, i).copy_from(x.select(0, mine[size_t(i)] / k));
    Tensor gu = Tensor::empty({n, 2 * I}, DType::f32);
    matmul_weight_rows(
        xe, *gate_up_, le * 2 * I, 2 * I,
        gate_up_bias_ ? gate_up_bias_->data().narrow(0, le * 2 * I, 2 * I) : Tensor(), gu);
    Tensor gate = gu.narrow(1, 0, I).contiguous(), up = gu.narrow(1, I, I).contiguous();
    if (spec_.activation == ExpertActivation::silu)
      ops::silu_mul(gate, up, gate);
    else
      ops::swiglu_oai_mul(gate, up, spec_.swiglu_alpha, spec_.swiglu_limit, gate);
    Tensor ye = Tensor::empty({n, D}, DType::f32);
    matmul_weight_rows(
        gate, *down_, le * D, D,
        down_bias_ && add_down_bias_ ? down_bias_->data().narrow(0, le * D, D) : Tensor(), ye);
    for (int64_t i = 0; i < n; ++i) by_slot.select(0, mine[size_t(i)]).copy_from(ye.select(0, i));
  }
  Tensor out = Tensor::empty({T, D}, DType::f32);
  ops::moe_combine(expert_out, weights, out);
  // Each rank's partial sums (its I slice, or its experts), added in rank order.
  if (communicator_->world_size() > 1)
    communicator_->all_reduce_sum(out.data<float>(), static_cast<size_t>(out.numel()));
  return out;
}

}  // namespace refit
