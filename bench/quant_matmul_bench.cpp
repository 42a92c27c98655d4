// Decode (M = 1) matmul with quantized weights through refit::ops::matmul_quantized, beside
// bf16 weights through refit::ops::matmul, on the medium model's FFN shape (K = 2048,
// N = 5632; override with REFIT_BENCH_K / REFIT_BENCH_N). Each iteration reads the next of
// enough weight copies to exceed the L3 cache (REFIT_BENCH_MIB, default 1024 MiB in all),
// so the figures are DRAM bandwidth, as in a real decode step. REFIT_BENCH_ROWS sets the rows
// of x (default 1; the MoE experts of a prefill see a few each). `wGB/s` counts stored bytes
// (codes + scales) per second of wall time; `wGB/s_cpu` per second of process CPU time,
// which time-sharing on a loaded machine inflates far less. The `BM_read` rows read the same
// copies with no arithmetic: the ceiling for the kernels' wGB/s, on the same pages. The w8a8 rows
// quantize the activations each iteration (int8 blocks for q8_0/mxfp4, e4m3 per token for fp8) and
// run the integer-dot and bf16-dot kernels.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/stream_read.h"
#include "kernels/matmul_quantized.h"
#include "kernels/ops.h"
#include "kernels/quant/quant_scheme.h"
#include "kernels/registry.h"
#include "weights/layout_transform.h"

namespace {
using namespace refit;

int64_t env_or(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

struct Weights {
  std::vector<Tensor> codes, scales;  // copies; scales undefined for bf16
  int64_t group = 0;
  size_t bytes_each = 0;
};

// `scheme` may end in "+interleaved": Q8_0 codes in the int8-activation kernel's layout.
Weights make_weights(std::string scheme, int64_t n, int64_t k) {
  const std::string suffix = "+interleaved";
  const bool interleaved = scheme.size() > suffix.size() && scheme.ends_with(suffix);
  if (interleaved) scheme.resize(scheme.size() - suffix.size());
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = dist(rng);
  Weights out;
  const size_t budget = static_cast<size_t>(env_or("REFIT_BENCH_MIB", 1024)) << 20;
  if (scheme == "bf16") {
    Tensor f = Tensor::from_floats({n, k}, w).to(DType::bf16);
    out.bytes_each = f.nbytes();
    for (size_t used = 0; used < budget || out.codes.size() < 2; used += out.bytes_each)
      out.codes.push_back(f.clone());
    return out;
  }
  const QuantScheme s = parse_quant_scheme(scheme);
  out.group = s.group(k);
  Tensor codes = Tensor::empty({n, code_row_bytes(s, k)}, DType::u8);
  Tensor scales = Tensor::empty({n, s.scale_cols(k)}, s.scale_dtype());
  quantize_rows(s, w.data(), n, k, codes.raw_data(), scales.raw_data());
  if (interleaved) codes = interleave_4x16(codes);
  out.bytes_each = codes.nbytes() + scales.nbytes();
  for (size_t used = 0; used < budget || out.codes.size() < 2; used += out.bytes_each) {
    Tensor c = codes.clone();
    out.codes.push_back(Tensor::from_storage(c.storage(), s.code_dtype(), {n, k}));
    out.codes.back().set_layout(codes.layout());
    out.scales.push_back(scales.clone());
  }
  return out;
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// The scalar kernel for the same arguments (matmul_quantized_cpu.cpp), for comparison.
kernels::MatmulQuantizedFn scalar_kernel(const std::string& scheme) {
  const std::string name =
      "matmul_quantized.cpu." + std::string(scheme == "fp8" ? "f8" : scheme) + "_plain";
  for (const Kernel* k : KernelRegistry::global().kernels("matmul_quantized"))
    if (k->name == name) return reinterpret_cast<kernels::MatmulQuantizedFn>(k->fn);
  std::abort();
}

void BM_decode(benchmark::State& state, std::string scheme, bool scalar) {
  const int64_t K = env_or("REFIT_BENCH_K", 2048), N = env_or("REFIT_BENCH_N", 5632);
  const int64_t M = env_or("REFIT_BENCH_ROWS", 1);
  const Weights w = make_weights(scheme, N, K);
  Tensor x = Tensor::empty({M, K}, DType::f32), out = Tensor::empty({M, N}, DType::f32);
  for (int64_t i = 0; i < M * K; ++i) x.data<float>()[i] = std::sin(0.1f * float(i));
  // Integer-dot W8A8 (q8_0-w8a8, mxfp4-w8a8): the activations are quantized in every
  // iteration, as a decode step does.
  const QuantScheme qs =
      scheme == "bf16" ? QuantScheme{} : parse_quant_scheme(scheme.substr(0, scheme.find('+')));
  const bool w8a8 = qs.w8a8, int8 = w8a8 && qs.int8_activations();
  Tensor xq = Tensor::empty({M, K}, DType::i8), xd = Tensor::empty({M, K / 32}, DType::f32);
  Tensor x8 = Tensor::empty({M, K}, DType::f8_e4m3fn), x8s = Tensor::empty({M}, DType::f32);
  size_t next = 0;
  double cpu = 0;
  for (auto _ : state) {
    const double c0 = cpu_seconds();
    if (scheme == "bf16") {
      ops::matmul(x, w.codes[next], Tensor(), out);
    } else if (int8) {
      ops::quantize_per_block_q8(x, xq, xd);
      ops::matmul_quantized(xq, xd, w.codes[next], w.scales[next], w.group, Tensor(), out);
    } else if (w8a8) {
      ops::quantize_per_token_fp8(x, x8, x8s);
      ops::matmul_quantized(x8, x8s, w.codes[next], w.scales[next], w.group, Tensor(), out);
    } else if (scalar)
      scalar_kernel(scheme)(x, Tensor(), w.codes[next], w.scales[next], w.group, Tensor(), out);
    else
      ops::matmul_quantized(x, Tensor(), w.codes[next], w.scales[next], w.group, Tensor(), out);
    cpu += cpu_seconds() - c0;
    benchmark::DoNotOptimize(out.data<float>()[0]);
    next = (next + 1) % w.codes.size();
  }
  const double bytes = double(w.bytes_each) * double(state.iterations());
  state.counters["wGB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsRate);
  state.counters["wGB/s_cpu"] = bytes * 1e-9 / cpu;
  state.counters["threads"] = num_threads();
  state.counters["rows"] = static_cast<double>(M);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2e-9 * double(M * N * K) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(cpu::cpu_isa_name());
}

// The same weight copies read and nothing else, one contiguous share per thread through the
// same pool (read_sweep: independent full-width loads): the ceiling each kernel's wGB/s is
// measured against, taken in the same run on the same pages.
void BM_read(benchmark::State& state, std::string scheme) {
  const int64_t K = env_or("REFIT_BENCH_K", 2048), N = env_or("REFIT_BENCH_N", 5632);
  const Weights w = make_weights(scheme, N, K);
  const int64_t shares = num_threads();
  std::vector<uint64_t> sink(static_cast<size_t>(shares) * 8, 0);
  size_t next = 0;
  for (auto _ : state) {
    const Tensor& c = w.codes[next];
    const Tensor* s = w.scales.empty() ? nullptr : &w.scales[next];
    parallel_for(shares, [&](int64_t p0, int64_t p1, int idx) {
      for (int64_t p = p0; p < p1; ++p) {
        const size_t cb = c.nbytes(), c0 = cb * p / shares, c1 = cb * (p + 1) / shares;
        uint64_t sum = cpu::read_sweep(static_cast<const uint8_t*>(c.raw_data()) + c0, c1 - c0);
        if (s) {
          const size_t sb = s->nbytes(), s0 = sb * p / shares, s1 = sb * (p + 1) / shares;
          sum += cpu::read_sweep(static_cast<const uint8_t*>(s->raw_data()) + s0, s1 - s0);
        }
        sink[static_cast<size_t>(idx) * 8] += sum;
      }
    });
    next = (next + 1) % w.codes.size();
  }
  benchmark::DoNotOptimize(sink.data());
  const double bytes = double(w.bytes_each) * double(state.iterations());
  state.counters["wGB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsRate);
  state.counters["threads"] = num_threads();
}

BENCHMARK_CAPTURE(BM_read, bf16, std::string("bf16"))->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_read, q8_0, std::string("q8_0"))->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, bf16, std::string("bf16"), false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, q8_0, std::string("q8_0"), false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, fp8, std::string("fp8"), false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, mxfp4, std::string("mxfp4"), false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, q8_0_w8a8, std::string("q8_0-w8a8"), false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, q8_0_w8a8_interleaved, std::string("q8_0-w8a8+interleaved"), false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, mxfp4_w8a8, std::string("mxfp4-w8a8"), false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, fp8_w8a8, std::string("fp8-channel-w8a8"), false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, q8_0_scalar, std::string("q8_0"), true)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, fp8_scalar, std::string("fp8"), true)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, mxfp4_scalar, std::string("mxfp4"), true)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
