// refit's matmul beside ggml's mul_mat on the same operands, alternating in one process.
//
//   build/bench/ggml_matmul_side_by_side M K N [ROUNDS] [f16|bf16|f32] [THREADS]
//
// On a VM whose speed drifts by 2x within minutes, two programs run one after the other
// (bench/side_by_side.sh) can only resolve large differences; here every round times
// refit's kernel and then ggml's (the order swapped every round), each for ~0.3 s, and the
// refit / ggml ratio of that round is recorded, so both see the same machine state. The
// median of the per-round ratios is the figure to quote. Built only when CMake is given
// REFIT_GGML_DIR, a llama.cpp or ggml checkout built by the user (refit neither ships nor
// builds ggml): its headers and libggml, libggml-base and libggml-cpu.
//
// Operands: x [M, K] f32 random in [-1, 1), w [N, K] of that dtype (the same values for
// both; ggml's src0 is w, its src1 is x, as llama.cpp's linear layers call it). ggml
// converts x to w's type inside the op (llama.cpp's numerics); refit keeps x f32. The
// printed max |difference| shows they computed the same product, to within that rounding.
// ggml runs on its own persistent thread pool (ggml_threadpool_new), so neither side pays
// thread start-up per call.
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int usage() {
  std::fprintf(stderr,
               "usage: ggml_matmul_side_by_side M K N [ROUNDS=10] [f16|bf16|f32] [THREADS=2]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return usage();
  const int64_t M = std::atoll(argv[1]), K = std::atoll(argv[2]), N = std::atoll(argv[3]);
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 10;
  const std::string type = argc > 5 ? argv[5] : "f16";
  const int threads = argc > 6 ? std::atoi(argv[6]) : 2;
  if (M < 1 || K < 1 || N < 1 || rounds < 1 || threads < 1 ||
      (type != "f16" && type != "bf16" && type != "f32"))
    return usage();
  const refit::DType wtype = type == "bf16"  ? refit::DType::bf16
                             : type == "f32" ? refit::DType::f32
                                             : refit::DType::f16;
  const ggml_type gtype = type == "bf16"  ? GGML_TYPE_BF16
                          : type == "f32" ? GGML_TYPE_F32
                                          : GGML_TYPE_F16;
  const int64_t wbytes = type == "f32" ? 4 : 2;
  refit::set_num_threads(threads);

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  refit::Tensor x = refit::Tensor::empty({M, K}, refit::DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = dist(rng);
  refit::Tensor wf = refit::Tensor::empty({N, K}, refit::DType::f32);
  for (int64_t i = 0; i < wf.numel(); ++i) wf.data<float>()[i] = dist(rng);
  const refit::Tensor w = wtype == refit::DType::f32 ? wf : wf.to(wtype);
  refit::Tensor out = refit::Tensor::empty({M, N}, refit::DType::f32);

  // Operands, result and (f16/bf16 weights) the copy of x that ggml converts inside the op.
  const size_t bytes =
      static_cast<size_t>(N * K * wbytes + M * K * 4 + M * N * 4 + M * K * 2) + (size_t{64} << 20);
  ggml_init_params params = {bytes, nullptr, false};
  ggml_context* ctx = ggml_init(params);
  if (!ctx) {
    std::fprintf(stderr, "ggml_init failed for %zu bytes\n", bytes);
    return 1;
  }
  ggml_tensor* a = ggml_new_tensor_2d(ctx, gtype, K, N);
  ggml_tensor* b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, M);
  std::memcpy(a->data, w.raw_data(), static_cast<size_t>(N * K * wbytes));
  std::memcpy(b->data, x.raw_data(), static_cast<size_t>(M * K * 4));
  ggml_tensor* c = ggml_mul_mat(ctx, a, b);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, c);
  ggml_threadpool_params pool_params = ggml_threadpool_params_default(threads);
  ggml_threadpool* pool = ggml_threadpool_new(&pool_params);
  ggml_cplan plan = ggml_graph_plan(graph, threads, pool);
  std::vector<uint8_t> work(plan.work_size);
  plan.work_data = work.data();

  auto run_refit = [&] { refit::ops::matmul(x, w, refit::Tensor(), out); };
  auto run_ggml = [&] {
    if (ggml_graph_compute(graph, &plan) != GGML_STATUS_SUCCESS) {
      std::fprintf(stderr, "ggml_graph_compute failed\n");
      std::exit(1);
    }
  };
  run_refit();
  run_ggml();
  double max_diff = 0, max_ref = 0;
  const auto* theirs = static_cast<const float*>(c->data);
  for (int64_t i = 0; i < M * N; ++i) {
    max_diff = std::max(max_diff, std::fabs(double(out.data<float>()[i]) - theirs[i]));
    max_ref = std::max(max_ref, std::fabs(double(theirs[i])));
  }
  std::printf(
      "M %lld K %lld N %lld, %s weights, %d threads, %d rounds; max |refit - ggml| %.3g "
      "(max |out| %.3g)\n",
      static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), type.c_str(),
      threads, rounds, max_diff, max_ref);

  const double gflop = 2.0 * M * K * N * 1e-9;
  auto rate = [&](auto& fn) {
    const double start = now();
    int calls = 0;
    do {
      fn();
      ++calls;
    } while (now() - start < 0.3);
    return gflop * calls / (now() - start);
  };
  std::vector<double> ours, their, ratio;
  std::printf("%-6s %14s %14s %8s\n", "round", "refit GFLOP/s", "ggml GFLOP/s", "ratio");
  for (int r = 0; r < rounds; ++r) {
    double o, t;
    if (r % 2 == 0) {
      o = rate(run_refit);
      t = rate(run_ggml);
    } else {
      t = rate(run_ggml);
      o = rate(run_refit);
    }
    ours.push_back(o);
    their.push_back(t);
    ratio.push_back(o / t);
    std::printf("%-6d %14.1f %14.1f %8.3f\n", r + 1, o, t, o / t);
  }
  std::printf(
      "median: refit %.1f, ggml %.1f GFLOP/s; refit / ggml %.3f (per-round ratios %.3f-%.3f)\n",
      median(ours), median(their), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
      *std::max_element(ratio.begin(), ratio.end()));
  ggml_threadpool_free(pool);
  ggml_free(ctx);
  return 0;
}
