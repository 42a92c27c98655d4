// matmul kernels against the scalar reference: f32 (OpenBLAS) and f16/bf16 (Highway)
// weights, odd shapes, every SIMD target, batch invariance, dispatch and refusals.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reference.h"
#include "kernels/ops.h"
#include "kernels_test_util.h"
#include "weights/layout_transform.h"

namespace refit {
namespace {

using testing::for_each_isa;
using testing::kNmseF32;
using testing::nmse;
using testing::random_tensor;

struct MatmulShape {
  int64_t M, K, N;
};
// Odd sizes on purpose: tails of every vector width and tile shape.
const MatmulShape kShapes[] = {{1, 1, 1},    {1, 3, 17},   {1, 17, 33},   {1, 127, 257},
                               {1, 256, 64}, {2, 33, 17},  {3, 64, 31},   {4, 257, 19},
                               {5, 31, 127}, {7, 17, 3},   {17, 127, 33}, {33, 256, 40},
                               {64, 96, 65}, {3, 2048, 9}, {9, 1000, 70}, {133, 40, 21}};

Tensor make_out(int64_t M, int64_t N) { return Tensor::empty({M, N}, DType::f32); }

// Optimised kernel and reference see the same (already rounded) weights, so only the f32
// summation order separates them.
void check_against_reference(DType wdtype,
                             void (*kernel)(const Tensor&, const Tensor&, const Tensor&, Tensor&)) {
  uint32_t seed = 1;
  for (const auto& s : kShapes)
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "M=" << s.M << " K=" << s.K << " N=" << s.N << " bias=" << with_bias);
      Tensor x = random_tensor({s.M, s.K}, seed++);
      Tensor w = random_tensor({s.N, s.K}, seed++).to(wdtype);
      Tensor bias = with_bias ? random_tensor({s.N}, seed++) : Tensor();
      Tensor out = make_out(s.M, s.N), expected = make_out(s.M, s.N);
      kernel(x, w, bias, out);
      cpu::reference::matmul(x, w, bias, expected);
      EXPECT_LT(nmse(out, expected), kNmseF32);
    }
}

TEST(KernelsMatmul, f32_blas_matches_reference) {
  check_against_reference(DType::f32, &cpu::matmul_f32_blas);
}

// The thread pool cuts work by timing, and OpenBLAS sums differently for another slice
// width (at this small shape it switches kernels: with the pool's ranges as slices this
// test failed), so the BLAS kernel slices N itself. Same bits with 1 and 2 threads and on
// repeated runs (a fresh load and a refit must prefill alike, law L2).
TEST(KernelsMatmul, f32_blas_bits_do_not_depend_on_threads_or_timing) {
  const int saved = num_threads();
  Tensor x = random_tensor({8, 72}, 5), w = random_tensor({1700, 72}, 6),
         bias = random_tensor({1700}, 7);
  set_num_threads(1);
  Tensor one = make_out(8, 1700);
  cpu::matmul_f32_blas(x, w, bias, one);
  set_num_threads(2);
  for (int run = 0; run < 20; ++run) {
    Tensor two = make_out(8, 1700);
    cpu::matmul_f32_blas(x, w, bias, two);
    ASSERT_EQ(std::memcmp(one.raw_data(), two.raw_data(), static_cast<size_t>(one.nbytes())), 0)
        << "run " << run;
  }
  set_num_threads(saved);
}

TEST(KernelsMatmul, bf16_weights_match_reference_under_every_isa) {
  for_each_isa([] { check_against_reference(DType::bf16, &cpu::matmul_hwy); });
}

// Both ways the prefill path can widen f16 weights (in the tile, or a block converted to
// f32 first): the CPU picks one, so the test forces each.
void for_each_f16_prefill(const std::function<void()>& check) {
  for (bool in_registers : {false, true}) {
    SCOPED_TRACE(in_registers ? "f16 prefill widened in registers" : "f16 prefill block");
    cpu::set_f16_prefill_in_registers(in_registers);
    check();
  }
  cpu::set_f16_prefill_in_registers(std::nullopt);
}

TEST(KernelsMatmul, f16_weights_match_reference_under_every_isa) {
  for_each_f16_prefill(
      [] { for_each_isa([] { check_against_reference(DType::f16, &cpu::matmul_hwy); }); });
}

TEST(KernelsMatmul, f16_prefill_setting_is_forced_and_restored) {
  const bool chosen = cpu::f16_prefill_in_registers();
  cpu::set_f16_prefill_in_registers(!chosen);
  EXPECT_EQ(cpu::f16_prefill_in_registers(), !chosen);
  cpu::set_f16_prefill_in_registers(std::nullopt);
  EXPECT_EQ(cpu::f16_prefill_in_registers(), chosen);
}

TEST(KernelsMatmul, f32_weights_through_highway_match_reference) {
  check_against_reference(DType::f32, &cpu::matmul_hwy);
}

// Against f32 weights the error is the weight format's own rounding: a per-dtype bound.
TEST(KernelsMatmul, narrow_weights_error_is_bounded_by_their_precision) {
  Tensor x = random_tensor({5, 300}, 7), w = random_tensor({70, 300}, 8);
  Tensor exact = make_out(5, 70);
  cpu::reference::matmul(x, w, Tensor(), exact);
  for (auto [dtype, bound] : {std::pair{DType::bf16, 1e-4}, std::pair{DType::f16, 1e-6}}) {
    Tensor out = make_out(5, 70);
    ops::matmul(x, w.to(dtype), Tensor(), out);
    double err = nmse(out, exact);
    EXPECT_LT(err, bound) << dtype_name(dtype);
    EXPECT_GT(err, 0.0) << dtype_name(dtype) << ": rounding should be visible";
  }
}

// Issue 8 needs each output row to be the same bits whatever batch it is computed in:
// decode (M = 1) and prefill (large M) take different code paths in matmul_cpu.cpp.
TEST(KernelsMatmul, f16_bf16_rows_are_bitwise_independent_of_batch_size) {
  for_each_f16_prefill([] {
    for_each_isa([] {
      for (DType dtype : {DType::bf16, DType::f16}) {
        // K: several of the prefill path's k chunks (256 or 512) and a scalar tail, or rows
        // short enough (<= 2 KiB) for the decode tiles meant for them; N: two of the
        // prefill path's 48-row blocks and a remainder of 5 rows.
        for (const int64_t K : {1100L, 203L}) {
          const int64_t M = 137, N = 101;
          Tensor x = random_tensor({M, K}, 11);
          Tensor w = random_tensor({N, K}, 12).to(dtype);
          Tensor bias = random_tensor({N}, 13);
          Tensor batch = make_out(M, N);
          cpu::matmul_hwy(x, w, bias, batch);
          for (int64_t m : {0L, 5L, 36L, 128L, 136L}) {
            // 5-32 rows (bf16: 5-64): the small-batch path (every remainder of 4 rows, 3-row
            // weight tiles); past that, the prefill path.
            for (int64_t rows : {1L, 2L, 3L, 4L, 7L, 9L, 23L, 32L, 49L, 64L}) {
              if (m + rows > M) continue;
              Tensor xs = x.narrow(0, m, rows).contiguous();
              Tensor part = make_out(rows, N);
              cpu::matmul_hwy(xs, w, bias, part);
              EXPECT_EQ(std::memcmp(part.data<float>(), batch.data<float>() + m * N,
                                    rows * N * sizeof(float)),
                        0)
                  << dtype_name(dtype) << " K " << K << " rows " << m << ".." << m + rows;
            }
          }
        }
      }
    });
  });
}

TEST(KernelsMatmul, strided_rows_of_x_and_out_are_honoured) {
  // x and out are column slices of wider tensors: rows are dense but not adjacent.
  Tensor xw = random_tensor({6, 80}, 21), w = random_tensor({19, 50}, 22);
  Tensor x = xw.narrow(1, 10, 50);
  Tensor outw = Tensor::empty({6, 30}, DType::f32);
  Tensor out = outw.narrow(1, 5, 19);
  Tensor expected = make_out(6, 19);
  cpu::reference::matmul(x, w, Tensor(), expected);
  for (DType dtype : {DType::f32, DType::bf16}) {
    ops::matmul(x, w.to(dtype), Tensor(), out);
    EXPECT_LT(nmse(out.contiguous(), expected), dtype == DType::f32 ? kNmseF32 : 1e-4);
  }
}

// A table with only the kernels defined next to this test (the global one also holds
// layout and serving kernels that other tests cover).
const KernelRegistry& core_registry() {
  static KernelRegistry* r = [] {
    auto* reg = new KernelRegistry();
    cpu::register_core_cpu_kernels(*reg);
    return reg;
  }();
  return *r;
}

TEST(KernelsMatmul, dispatch_picks_blas_for_f32_and_highway_for_bf16) {
  Tensor x = random_tensor({5, 8}, 1), out = make_out(5, 4);
  std::array<const Tensor*, 4> args{};
  for (auto [dtype, name] : {std::pair{DType::f32, "matmul.cpu.f32_blas"},
                             std::pair{DType::bf16, "matmul.cpu.f16_bf16_hwy"},
                             std::pair{DType::f16, "matmul.cpu.f16_bf16_hwy"}}) {
    Tensor w = random_tensor({4, 8}, 2).to(dtype);
    Tensor none;
    args = {&x, &w, &none, &out};
    EXPECT_EQ(core_registry().select("matmul", args).name, name);
  }
}

TEST(KernelsMatmul, dispatch_sends_f32_decode_shapes_to_highway) {
  Tensor w = random_tensor({4, 8}, 2), none;
  for (int64_t M : {1L, 4L, 5L}) {
    Tensor x = random_tensor({M, 8}, 1), out = make_out(M, 4);
    std::array<const Tensor*, 4> args{&x, &w, &none, &out};
    EXPECT_EQ(core_registry().select("matmul", args).name,
              M <= 4 ? "matmul.cpu.f32_hwy_decode" : "matmul.cpu.f32_blas")
        << "M=" << M;
  }
}

// For every float dtype and several batch sizes: `lay_out` turns a plain [N, K] weight
// into another layout of the same values, and dispatch (by that tensor's layout and
// strides) must give the plain layout's result bit for bit.
// At every instruction set this CPU has (the vector width and whether MulAdd is fused
// change the plain bits; each layout's kernel must follow them).
void expect_plain_bits(int64_t N, int64_t K, uint32_t seed,
                       const std::function<Tensor(const Tensor&)>& lay_out) {
  for (const std::string& isa : cpu::cpu_isas_available())
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (int64_t M : {1, 3, 5, 17}) {
        cpu::set_cpu_isa(isa);
        SCOPED_TRACE(::testing::Message() << isa << " " << dtype_name(dt) << " M=" << M);
        Tensor x = random_tensor({M, K}, seed++);
        Tensor w = random_tensor({N, K}, seed++).to(dt);
        Tensor bias = random_tensor({N}, seed++);
        Tensor other = lay_out(w);
        Tensor plain_out = make_out(M, N), other_out = make_out(M, N);
        ops::matmul(x, w, bias, plain_out);
        ops::matmul(x, other, bias, other_out);
        EXPECT_EQ(0, std::memcmp(plain_out.data<float>(), other_out.data<float>(),
                                 M * N * sizeof(float)));
      }
  const char* env = std::getenv("REFIT_CPU_ISA");
  cpu::set_cpu_isa(env && *env ? env : cpu::cpu_isas_available().front());
}

// AITER's shuffled_16x16 layout (decode reads it in place on AVX-512, prefill un-shuffles
// a tile at a time): a few tiles, and many tiles of long rows.
TEST(KernelsMatmul, shuffled_16x16_weights_give_the_plain_layouts_bits) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{48, 96}, std::pair<int64_t, int64_t>{80, 2048}})
    expect_plain_bits(n, k, 700, [](const Tensor& w) {
      Tensor shuffled = shuffle_16x16(w);
      EXPECT_EQ(shuffled.layout(), Layout::shuffled_16x16);
      return shuffled;
    });
}

// A transposed weight view ([N, K] over [K, N] storage), ragged N included; for f32 too
// (no BLAS call whose blocking would depend on M).
// Decode streams the storage's rows in slices of columns (whole vectors, then a ragged
// rest): N 100 at K 2048 takes several slices and a column tail.
TEST(KernelsMatmul, transposed_weight_views_give_the_plain_layouts_bits) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{37, 70}, std::pair<int64_t, int64_t>{100, 2048}})
    expect_plain_bits(n, k, 800, [](const Tensor& w) {
      Tensor transposed = w.transpose(0, 1).clone().transpose(0, 1);  // [K, N] storage
      EXPECT_EQ(transposed.stride(0), 1);
      return transposed;
    });
}

TEST(KernelsMatmul, refuses_mismatched_shapes_with_both_shapes_named) {
  Tensor x = random_tensor({2, 8}, 1), w = random_tensor({4, 7}, 2), out = make_out(2, 4);
  try {
    ops::matmul(x, w, Tensor(), out);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 7]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 8]"), std::string::npos) << e.what();
  }
  Tensor w_ok = random_tensor({4, 8}, 2), bad_out = make_out(2, 5);
  EXPECT_THROW(ops::matmul(x, w_ok, Tensor(), bad_out), Error);
  Tensor bad_bias = random_tensor({3}, 3);
  EXPECT_THROW(ops::matmul(x, w_ok, bad_bias, out), Error);
}

TEST(KernelsMatmul, transposed_weight_view_is_refused_by_the_row_major_kernels_with_a_reason) {
  Tensor x = random_tensor({2, 8}, 1), out = make_out(2, 4), none;
  Tensor wt = Tensor::empty({8, 4}, DType::bf16).transpose(0, 1);  // [4, 8], column-major
  std::array<const Tensor*, 4> args{&x, &wt, &none, &out};
  try {
    core_registry().select("matmul", args);
    FAIL() << "expected a DispatchError";
  } catch (const DispatchError& e) {
    EXPECT_NE(std::string(e.what()).find("stride 1"), std::string::npos) << e.what();
  }
}

TEST(KernelsMatmul, refuses_unsupported_weight_dtype) {
  Tensor x = random_tensor({2, 8}, 1), out = make_out(2, 4);
  Tensor w = Tensor::empty({4, 8}, DType::i8);
  EXPECT_THROW(ops::matmul(x, w, Tensor(), out), DispatchError);
}

TEST(KernelsMatmul, forcing_scalar_isa_still_gives_correct_results) {
  cpu::set_cpu_isa("scalar");
  const std::string name = cpu::cpu_isa_name();
  EXPECT_TRUE(name == "SCALAR" || name == "EMU128") << name;
  Tensor x = random_tensor({6, 123}, 5), w = random_tensor({29, 123}, 6).to(DType::bf16);
  Tensor out = make_out(6, 29), expected = make_out(6, 29);
  ops::matmul(x, w, Tensor(), out);
  cpu::reference::matmul(x, w, Tensor(), expected);
  EXPECT_LT(nmse(out, expected), kNmseF32);
  const auto isas = cpu::cpu_isas_available();
  cpu::set_cpu_isa(isas.front());
  if (isas.size() > 1) {
    EXPECT_NE(cpu::cpu_isa_name(), name);
  }
  EXPECT_THROW(cpu::set_cpu_isa("avx9000"), Error);
}

}  // namespace
}  // namespace refit
