// The CUDA backend's kernels against the CPU kernels, in the spirit of llama.cpp's
// test-backend-ops: the same inputs are copied to the GPU, the op runs there (through
// refit::ops and the dispatch table), and the result copied back must match the CPU
// result within f32 rounding (normalised MSE). Bad ids/positions must be refused on
// the GPU path as on the CPU path.
//
// Law L3 in a CUDA build (seed 003): CPU tensors still reach CPU kernels although CUDA
// rows are registered, tensors tagged cuda reach the CUDA rows, and mixed devices are
// refused. Those dispatch tests need no GPU; the kernel comparisons skip without one.
// Everything compiles in every build; CUDA-only parts are under REFIT_HAVE_CUDA.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/storage.h"
#include "kernels/op_fns.h"
#include "kernels/ops.h"
#include "kernels/registry.h"
#include "kernels_test_util.h"

#ifdef REFIT_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace refit {
namespace {

using testing::nmse;
using testing::random_tensor;

const char* const kOps[] = {"matmul",   "rms_norm",  "rope", "softmax",
                            "silu_mul", "embedding", "add",  "attention"};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A tensor whose storage claims cuda:0 but is host memory: dispatch reads only the tag
// (kernels_dispatch_test.cpp does the same), so no GPU is needed to test selection.
[[maybe_unused]] Tensor tagged_cuda(Shape shape, DType dtype = DType::f32) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const size_t nbytes = dtype_nbytes(dtype, n) + 64;
  auto* memory = new uint8_t[nbytes]();
  auto storage = Storage::wrap(memory, nbytes, Device::cuda(0), [memory] { delete[] memory; });
  return Tensor::from_storage(storage, dtype, shape);
}

[[maybe_unused]] std::string select_name(const char* op, std::vector<const Tensor*> args) {
  return KernelRegistry::global().select(op, std::span<const Tensor* const>(args)).name;
}

TEST(CudaDispatch, TableHasCudaRowsExactlyInACudaBuild) {
  int cuda_rows = 0;
  for (const Kernel* k : KernelRegistry::global().kernels())
    if (k->device == DeviceType::cuda && starts_with(k->name, (k->op + ".cuda.").c_str()))
      ++cuda_rows;
#ifdef REFIT_HAVE_CUDA
  for (const char* op : kOps) {
    bool found = false;
    for (const Kernel* k : KernelRegistry::global().kernels(op))
      found |= k->device == DeviceType::cuda &&
               starts_with(k->name, (std::string(op) + ".cuda.").c_str());
    EXPECT_TRUE(found) << "no CUDA kernel for " << op;
  }
  EXPECT_NE(KernelRegistry::global().table().find("matmul.cuda.f32_cublas"), std::string::npos);
#else
  EXPECT_EQ(cuda_rows, 0) << "a build without REFIT_CUDA registers no CUDA kernels";
#endif
}

// Seed 003 in a CUDA build: CUDA rows with the same priority as (or above) the CPU rows
// exist, yet every op on CPU tensors picks a CPU kernel, and runs correctly.
TEST(CudaDispatch, CpuTensorsStillReachCpuKernels) {
  Tensor x = random_tensor({3, 8}, 1), w = random_tensor({5, 8}, 2),
         out = Tensor::empty({3, 5}, DType::f32);
  Tensor norm_w = random_tensor({8}, 3), norm_out = Tensor::empty({3, 8}, DType::f32);
  Tensor ids = Tensor::empty({2}, DType::i32), emb_out = Tensor::empty({2, 8}, DType::f32);
  Tensor q = random_tensor({2, 4, 8}, 4), kc = random_tensor({6, 2, 8}, 5),
         vc = random_tensor({6, 2, 8}, 6);
  Tensor att_out = Tensor::empty({2, 4, 8}, DType::f32), cos_sin = random_tensor({6, 8}, 7);
  Tensor positions = Tensor::empty({2}, DType::i32);
  Tensor w_bf16 = w.to(DType::bf16), empty_bias;
  const std::vector<std::pair<const char*, std::vector<const Tensor*>>> cases = {
      {"matmul", {&x, &w, &empty_bias, &out}},
      {"matmul", {&x, &w_bf16, &empty_bias, &out}},
      {"rms_norm", {&x, &norm_w, &norm_out}},
      {"rope", {&q, &positions, &cos_sin}},
      {"softmax", {&x}},
      {"silu_mul", {&x, &x, &norm_out}},
      {"embedding", {&w, &ids, &emb_out}},
      {"add", {&x, &x, &norm_out}},
      {"attention", {&q, &kc, &vc, &att_out, &empty_bias}},
  };
  for (const auto& [op, args] : cases) {
    const Kernel& k = KernelRegistry::global().select(op, std::span<const Tensor* const>(args));
    EXPECT_EQ(k.device, DeviceType::cpu) << op << " chose " << k.name;
  }
  ops::matmul(x, w, Tensor(), out);  // and the CPU kernel computes the right thing
  EXPECT_NEAR(
      out.get({1, 2}),
      [&] {
        double s = 0;
        for (int k = 0; k < 8; ++k) s += x.get({1, k}) * w.get({2, k});
        return s;
      }(),
      1e-5);
}

TEST(CudaDispatch, CudaTensorsReachCudaRowsAndMixedDevicesAreRefused) {
#ifndef REFIT_HAVE_CUDA
  GTEST_SKIP() << "no CUDA backend in this build (configure with -DREFIT_CUDA=ON)";
#else
  Tensor x = tagged_cuda({3, 8}), w = tagged_cuda({5, 8}), out = tagged_cuda({3, 5});
  Tensor w_f16 = tagged_cuda({5, 8}, DType::f16), none;
  Tensor norm_w = tagged_cuda({8}), norm_out = tagged_cuda({3, 8});
  Tensor q = tagged_cuda({2, 4, 8}), kc = tagged_cuda({6, 2, 8}), vc = tagged_cuda({6, 2, 8});
  Tensor att_out = tagged_cuda({2, 4, 8});
  // matmul may be outranked by kernels_dispatch_test's priority-1000 double in this process.
  const std::string mm = select_name("matmul", {&x, &w, &none, &out});
  EXPECT_TRUE(mm == "matmul.cuda.f32_cublas" || mm == "matmul.test_double.cuda_any") << mm;
  const std::string mm16 = select_name("matmul", {&x, &w_f16, &none, &out});
  EXPECT_TRUE(mm16 == "matmul.cuda.f16_bf16_warp" || mm16 == "matmul.test_double.cuda_any") << mm16;
  EXPECT_EQ(select_name("rms_norm", {&x, &norm_w, &norm_out}), "rms_norm.cuda.block");
  EXPECT_EQ(select_name("attention", {&q, &kc, &vc, &att_out, &none}),
            "attention.cuda.online_softmax");

  Tensor host_x = Tensor::empty({3, 8}, DType::f32);
  try {
    ops::rms_norm(host_x, norm_w, 1e-5f, norm_out);
    FAIL() << "mixed devices must be refused";
  } catch (const DispatchError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("different devices"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  }
  // A limit of a CUDA row is a reason in the error, not a crash: head_dim 512 > 256.
  Tensor q512 = tagged_cuda({1, 1, 512}), k512 = tagged_cuda({2, 1, 512}),
         o512 = tagged_cuda({1, 1, 512});
  try {
    select_name("attention", {&q512, &k512, &k512, &o512, &none});
    FAIL() << "head_dim 512 must be refused";
  } catch (const DispatchError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("attention.cuda.online_softmax"), std::string::npos) << msg;
    EXPECT_NE(msg.find("head_dim 512 exceeds 256"), std::string::npos) << msg;
  }
#endif
}

// ---- CUDA kernels against CPU kernels (a GPU is needed) ----

#define SKIP_WITHOUT_CUDA_DEVICE()                                                               \
  do {                                                                                           \
    DeviceAllocator* cuda = device_allocator(DeviceType::cuda);                                  \
    if (!cuda) GTEST_SKIP() << "no CUDA backend in this build (configure with -DREFIT_CUDA=ON)"; \
    if (cuda->device_count() == 0)                                                               \
      GTEST_SKIP() << "no CUDA device: " << cuda->unavailable_reason();                          \
  } while (0)

constexpr double kNmse = 1e-10;  // f32 on both sides; only summation order differs

Tensor gpu(const Tensor& t) { return t.to(Device::cuda(0)); }
Tensor gpu_empty(Shape shape) {
  return Tensor::empty(std::move(shape), DType::f32, Device::cuda(0));
}

#ifdef REFIT_HAVE_CUDA
// ops::matmul on cuda tensors, unless kernels_dispatch_test.cpp has registered its
// priority-1000 test double in this process: then the CUDA row is called directly.
void cuda_matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const Tensor* args[] = {&x, &w, &bias, &out};
  if (starts_with(KernelRegistry::global().select("matmul", args).name, "matmul.cuda.")) {
    ops::matmul(x, w, bias, out);
    return;
  }
  static const KernelRegistry cuda_only = [] {
    KernelRegistry r;
    register_cuda_kernels(r);
    return r;
  }();
  reinterpret_cast<kernels::MatmulFn>(cuda_only.select("matmul", args).fn)(x, w, bias, out);
}
#else
void cuda_matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  ops::matmul(x, w, bias, out);
}
#endif

TEST(CudaKernels, MatmulF32MatchesCpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int64_t M : {1, 3, 5, 67}) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " bias=" << with_bias);
      const int64_t K = 96, N = 40;
      Tensor x = random_tensor({M, K}, 10 + M), w = random_tensor({N, K}, 11);
      Tensor bias = with_bias ? random_tensor({N}, 12) : Tensor();
      Tensor expected = Tensor::empty({M, N}, DType::f32);
      ops::matmul(x, w, bias, expected);
      Tensor out = gpu_empty({M, N});
      cuda_matmul(gpu(x), gpu(w), with_bias ? gpu(bias) : Tensor(), out);
      EXPECT_LT(nmse(out, expected), kNmse);
    }
  }
}

TEST(CudaKernels, MatmulWithRowStridedViewsMatchesCpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // x and out are column slices of wider matrices: rows dense, leading dimension larger.
  Tensor x_wide = random_tensor({6, 80}, 20), w = random_tensor({24, 64}, 21);
  Tensor x = x_wide.narrow(1, 8, 64);
  Tensor expected = Tensor::empty({6, 24}, DType::f32);
  ops::matmul(x, w, Tensor(), expected);
  Tensor out_wide = gpu_empty({6, 40});
  Tensor out = out_wide.narrow(1, 4, 24);
  cuda_matmul(gpu(x_wide).narrow(1, 8, 64), gpu(w), Tensor(), out);
  Tensor back = out_wide.to(Device::cpu()).narrow(1, 4, 24);
  EXPECT_LT(nmse(back, expected), kNmse);
  std::vector<float> all = out_wide.to_floats();  // columns outside the view untouched
  for (int64_t r = 0; r < 6; ++r) EXPECT_EQ(all[r * 40 + 0], 0.0f);
}

TEST(CudaKernels, MatmulF16AndBf16WeightsMatchCpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (DType wt : {DType::f16, DType::bf16}) {
    for (int64_t M : {1, 7}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " M=" << M);
      const int64_t K = 200, N = 33;
      Tensor x = random_tensor({M, K}, 30), w = random_tensor({N, K}, 31).to(wt);
      Tensor bias = random_tensor({N}, 32);
      Tensor expected = Tensor::empty({M, N}, DType::f32);
      ops::matmul(x, w, bias, expected);
      Tensor out = gpu_empty({M, N});
      cuda_matmul(gpu(x), gpu(w), gpu(bias), out);
      EXPECT_LT(nmse(out, expected), kNmse);
    }
  }
}

TEST(CudaKernels, RmsNormMatchesCpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Tensor x = random_tensor({5, 300}, 40), w = random_tensor({300}, 41);
  Tensor expected = Tensor::empty({5, 300}, DType::f32);
  ops::rms_norm(x, w, 1e-5f, expected);
  Tensor out = gpu_empty({5, 300});
  ops::rms_norm(gpu(x), gpu(w), 1e-5f, out);
  EXPECT_LT(nmse(out, expected), kNmse);
  Tensor in_place = gpu(x);  // out may alias x, as on the CPU
  ops::rms_norm(in_place, gpu(w), 1e-5f, in_place);
  EXPECT_LT(nmse(in_place, expected), kNmse);
}

TEST(CudaKernels, SoftmaxMatchesCpuIncludingMaskedEntries) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Tensor x = random_tensor({4, 1000}, 50, -8.0f, 8.0f);
  x.set({1, 3}, -INFINITY);
  Tensor expected = x.clone();
  ops::softmax(expected);
  Tensor y = gpu(x);
  ops::softmax(y);
  EXPECT_LT(nmse(y, expected), kNmse);
  EXPECT_EQ(y.to(Device::cpu()).get({1, 3}), 0.0);
}

TEST(CudaKernels, SiluMulAndAddMatchCpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Tensor g = random_tensor({7, 999}, 60, -100.0f, 100.0f), u = random_tensor({7, 999}, 61);
  Tensor expected = Tensor::empty({7, 999}, DType::f32);
  ops::silu_mul(g, u, expected);
  Tensor out = gpu_empty({7, 999});
  ops::silu_mul(gpu(g), gpu(u), out);
  EXPECT_LT(nmse(out, expected), kNmse);

  Tensor sum_expected = Tensor::empty({7, 999}, DType::f32);
  ops::add(g, u, sum_expected);
  Tensor a = gpu(g);
  ops::add(a, gpu(u), a);                              // out aliases a
  EXPECT_EQ(a.to_floats(), sum_expected.to_floats());  // one rounding: bitwise equal
}

TEST(CudaKernels, EmbeddingMatchesCpuForEveryTableDtype) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<float> id_values = {3, 0, 9, 3, 7};
  Tensor ids = Tensor::from_floats({5}, id_values).to(DType::i32);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor table = random_tensor({10, 70}, 70).to(dt);
    Tensor expected = Tensor::empty({5, 70}, DType::f32);
    ops::embedding(table, ids, expected);
    Tensor out = gpu_empty({5, 70});
    ops::embedding(gpu(table), gpu(ids), out);
    EXPECT_EQ(out.to_floats(), expected.to_floats());  // exact conversions: bitwise equal
  }
}

TEST(CudaKernels, OutOfRangeIdsAndPositionsAreRefusedOnTheGpuPath) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Tensor table = gpu(random_tensor({10, 8}, 80));
  Tensor ids = gpu(Tensor::from_floats({3}, std::vector<float>{1, 10, 2}).to(DType::i32));
  Tensor out = gpu_empty({3, 8});
  try {
    ops::embedding(table, ids, out);
    FAIL() << "id 10 of a 10-row table must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ids[1] = 10 is out of range for a table of 10 rows"),
              std::string::npos)
        << e.what();
  }
  Tensor x = gpu(random_tensor({2, 2, 8}, 81)), cos_sin = gpu(random_tensor({4, 8}, 82));
  Tensor positions = gpu(Tensor::from_floats({2}, std::vector<float>{0, -1}).to(DType::i32));
  try {
    ops::rope(x, positions, cos_sin, ops::RopeStyle::neox);
    FAIL() << "position -1 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("positions[1] = -1"), std::string::npos) << e.what();
  }
}

TEST(CudaKernels, RopeMatchesCpuForBothStylesAndPartialRotation) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (ops::RopeStyle style : {ops::RopeStyle::neox, ops::RopeStyle::interleaved}) {
    for (int64_t rot : {64, 32}) {
      SCOPED_TRACE(::testing::Message()
                   << "neox=" << (style == ops::RopeStyle::neox) << " rot=" << rot);
      Tensor x = random_tensor({5, 6, 64}, 90), cos_sin = random_tensor({32, rot}, 91);
      Tensor positions =
          Tensor::from_floats({5}, std::vector<float>{0, 4, 31, 7, 7}).to(DType::i32);
      Tensor expected = x.clone();
      ops::rope(expected, positions, cos_sin, style);
      Tensor y = gpu(x);
      ops::rope(y, gpu(positions), gpu(cos_sin), style);
      EXPECT_LT(nmse(y, expected), kNmse);
    }
  }
}

TEST(CudaKernels, AttentionMatchesCpuForPrefillDecodeAndLongContext) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int64_t T, start_pos, H, KVH, hd, max_seq;
  };
  for (const Case& c :
       {Case{5, 3, 8, 2, 64, 16}, Case{1, 0, 4, 4, 32, 4}, Case{1, 299, 8, 1, 128, 300},
        Case{3, 2, 2, 2, 256, 8}, Case{4, 0, 6, 3, 48, 4}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " start=" << c.start_pos << " H=" << c.H
                                      << " KVH=" << c.KVH << " hd=" << c.hd);
    Tensor q = random_tensor({c.T, c.H, c.hd}, 100);
    Tensor k = random_tensor({c.max_seq, c.KVH, c.hd}, 101, -2.0f, 2.0f);
    Tensor v = random_tensor({c.max_seq, c.KVH, c.hd}, 102);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    Tensor expected = Tensor::empty({c.T, c.H, c.hd}, DType::f32);
    ops::attention(q, k, v, c.start_pos, scale, expected);
    Tensor out = gpu_empty({c.T, c.H, c.hd});
    ops::attention(gpu(q), gpu(k), gpu(v), c.start_pos, scale, out);
    EXPECT_LT(nmse(out, expected), kNmse);
    // With sinks (gpt-oss): far above the scores, far below, about their size.
    Tensor sinks = Tensor::empty({c.H}, DType::f32);
    const float sink_values[] = {6.0f, -30.0f, 0.5f};
    for (int64_t h = 0; h < c.H; ++h) sinks.data<float>()[h] = sink_values[h % 3];
    ops::attention(q, k, v, c.start_pos, scale, expected, 0, sinks);
    ops::attention(gpu(q), gpu(k), gpu(v), c.start_pos, scale, out, 0, gpu(sinks));
    EXPECT_LT(nmse(out, expected), kNmse);
  }
}

}  // namespace
}  // namespace refit
