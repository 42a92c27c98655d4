// matmul GFLOP/s at decode (1 x K . K x N) and prefill (512 x K . K x N) shapes for f32,
// bf16 and f16 weights through refit's dispatch, beside OpenBLAS's own (multi-threaded)
// cblas_sgemm on the same shapes in the same run, plus STREAM-style memory bandwidth.
//
//   REFIT_THREADS=2 ./build/matmul_bench [--benchmark_filter=...]
//
// Decode is bound by reading the weights once, so each matmul also reports weight GB/s
// ("wGB/s") to compare with the bandwidth figures (issue 4: decode >= 60% of
// bandwidth / weight bytes). K, N default to 2048; REFIT_BENCH_K / REFIT_BENCH_N override,
// REFIT_BENCH_M lists the row counts (default 1,512).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"
#include "kernels/registry.h"

namespace {

using refit::DType;
using refit::Tensor;

int64_t env_or(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}
const int64_t kK = env_or("REFIT_BENCH_K", 2048);
const int64_t kN = env_or("REFIT_BENCH_N", 2048);

Tensor random_tensor(refit::Shape shape, uint32_t seed) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

void report(benchmark::State& state, int64_t M, int64_t weight_bytes) {
  const double flops = 2.0 * double(M) * double(kK) * double(kN);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["wGB/s"] = benchmark::Counter(
      double(weight_bytes) * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}

// refit::ops::matmul with weights of `dtype`: f32 goes to OpenBLAS (1 thread per refit
// pool thread), f16/bf16 to the Highway kernel.
void BM_refit_matmul(benchmark::State& state, DType dtype) {
  const int64_t M = state.range(0);
  Tensor x = random_tensor({M, kK}, 1);
  Tensor w = random_tensor({kN, kK}, 2).to(dtype);
  Tensor out = Tensor::empty({M, kN}, DType::f32), none;
  std::array<const Tensor*, 4> args{&x, &w, &none, &out};
  state.SetLabel(refit::KernelRegistry::global().select("matmul", args).name);
  for (auto _ : state) {
    refit::ops::matmul(x, w, Tensor(), out);
    benchmark::DoNotOptimize(out.data<float>());
  }
  report(state, M, static_cast<int64_t>(w.nbytes()));
}

// refit's OpenBLAS kernel called directly (dispatch may prefer a batch-invariant one):
// sgemm on 1 thread per pool thread, N split across the pool.
void BM_refit_f32_blas(benchmark::State& state) {
  const int64_t M = state.range(0);
  Tensor x = random_tensor({M, kK}, 1), w = random_tensor({kN, kK}, 2);
  Tensor out = Tensor::empty({M, kN}, DType::f32);
  for (auto _ : state) {
    refit::cpu::matmul_f32_blas(x, w, Tensor(), out);
    benchmark::DoNotOptimize(out.data<float>());
  }
  report(state, M, static_cast<int64_t>(w.nbytes()));
}

// OpenBLAS alone, threaded by itself with the same thread count: the baseline.
void BM_openblas_sgemm(benchmark::State& state) {
  const int64_t M = state.range(0);
  Tensor x = random_tensor({M, kK}, 1), w = random_tensor({kN, kK}, 2);
  Tensor out = Tensor::empty({M, kN}, DType::f32);
  refit::cpu::prepare_openblas();  // same core selection as refit's f32 kernel
  openblas_set_num_threads(refit::num_threads());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(kN), int(kK), 1.0f,
                x.data<float>(), int(kK), w.data<float>(), int(kK), 0.0f, out.data<float>(),
                int(kN));
    benchmark::DoNotOptimize(out.data<float>());
  }
  openblas_set_num_threads(1);  // as refit's f32 kernel expects
  report(state, M, static_cast<int64_t>(w.nbytes()));
}

// STREAM "copy" a[i] = b[i] over 2 x 512 MiB on the refit pool; bytes = read + write.
// And a read-only pass (sum of a 1 GiB array), the access pattern of decode's weights.
constexpr int64_t kStreamFloats = int64_t{128} << 20;  // 512 MiB per array

void BM_stream_copy(benchmark::State& state) {
  std::vector<float> a(kStreamFloats, 1.0f), b(kStreamFloats, 2.0f);
  for (auto _ : state) {
    refit::parallel_for(kStreamFloats, [&](int64_t s, int64_t e, int) {
      std::memcpy(a.data() + s, b.data() + s, size_t(e - s) * sizeof(float));
    });
    benchmark::DoNotOptimize(a.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(2.0 * kStreamFloats * sizeof(float) * 1e-9 * double(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_stream_read(benchmark::State& state) {
  std::vector<float> a(2 * kStreamFloats, 1.0f);
  std::vector<double> partial(64);
  for (auto _ : state) {
    refit::parallel_for(int64_t(a.size()), [&](int64_t s, int64_t e, int idx) {
      // Sixteen independent sums so the adds vectorise and do not limit the loads.
      float acc[16] = {};
      int64_t i = s;
      for (; i + 16 <= e; i += 16)
        for (int j = 0; j < 16; ++j) acc[j] += a[size_t(i + j)];
      float t = 0;
      for (float v : acc) t += v;
      for (; i < e; ++i) t += a[size_t(i)];
      partial[size_t(idx)] = t;
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(2.0 * kStreamFloats * sizeof(float) * 1e-9 * double(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// Rows of x: REFIT_BENCH_M, a comma-separated list (default 1,512: decode and prefill).
void args(benchmark::internal::Benchmark* b) {
  b->ArgName("M")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
  const char* v = std::getenv("REFIT_BENCH_M");
  std::string list = v && *v ? v : "1,512";
  for (size_t at = 0; at < list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    b->Arg(std::atoll(list.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
}

BENCHMARK_CAPTURE(BM_refit_matmul, f32, DType::f32)->Apply(args);
BENCHMARK(BM_refit_f32_blas)->Apply(args);
BENCHMARK(BM_openblas_sgemm)->Apply(args);
BENCHMARK_CAPTURE(BM_refit_matmul, bf16, DType::bf16)->Apply(args);
BENCHMARK_CAPTURE(BM_refit_matmul, f16, DType::f16)->Apply(args);
BENCHMARK(BM_stream_copy)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_stream_read)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("refit_threads", std::to_string(refit::num_threads()));
  benchmark::AddCustomContext("refit_cpu_isa", refit::cpu::cpu_isa_name());
  refit::cpu::prepare_openblas();
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("K", std::to_string(kK));
  benchmark::AddCustomContext("N", std::to_string(kN));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
