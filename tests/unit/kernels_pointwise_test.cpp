// rms_norm (with Gemma's weight offset), rope, softmax, silu_mul, gelu_tanh_mul, gelu_erf_mul,
// scale, embedding and add against the scalar reference over odd sizes, under every SIMD target,
// plus the refusals ops.cpp promises.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reference.h"
#include "kernels/ops.h"
#include "kernels_test_util.h"

namespace refit {
namespace {

using testing::for_each_isa;
using testing::kNmseF32;
using testing::nmse;
using testing::random_tensor;

const int64_t kSizes[] = {1, 3, 16, 17, 33, 127, 257, 1000, 4099};

TEST(KernelsPointwise, rms_norm_matches_reference) {
  for_each_isa([] {
    uint32_t seed = 100;
    for (int64_t T : {1, 3, 20})
      for (int64_t D : kSizes) {
        SCOPED_TRACE(::testing::Message() << "T=" << T << " D=" << D);
        Tensor x = random_tensor({T, D}, seed++, -3, 3), w = random_tensor({D}, seed++);
        Tensor out = Tensor::empty({T, D}, DType::f32), ref = Tensor::empty({T, D}, DType::f32);
        ops::rms_norm(x, w, 1e-5f, out);
        cpu::reference::rms_norm(x, w, 1e-5f, ref);
        EXPECT_LT(nmse(out, ref), kNmseF32);
      }
  });
}

TEST(KernelsPointwise, rms_norm_weight_offset_matches_reference) {
  for_each_isa([] {
    uint32_t seed = 150;
    for (int64_t D : kSizes) {
      SCOPED_TRACE(::testing::Message() << "D=" << D);
      Tensor x = random_tensor({3, D}, seed++, -3, 3), w = random_tensor({D}, seed++, -0.5f, 0.5f);
      Tensor out = Tensor::empty({3, D}, DType::f32), ref = Tensor::empty({3, D}, DType::f32);
      ops::rms_norm(x, w, 1e-6f, out, 1.0f);
      cpu::reference::rms_norm(x, w, 1e-6f, ref, 1.0f);
      EXPECT_LT(nmse(out, ref), kNmseF32);
      // Without the offset the result differs: the test would see a dropped offset.
      Tensor plain = Tensor::empty({3, D}, DType::f32);
      ops::rms_norm(x, w, 1e-6f, plain);
      EXPECT_GT(nmse(plain, ref), 1e-3);
    }
  });
}

// Gemma's (1 + w) is computed in f32 before the multiply: offset 1 on w is bit for bit
// offset 0 on the f32 weights w + 1; offset 0 is bit for bit the default call, including
// for a weight of -0 (w + 0 would turn it into +0 and flip the sign of a zero output).
TEST(KernelsPointwise, rms_norm_offset_is_an_f32_add_and_offset_zero_changes_no_bit) {
  for_each_isa([] {
    for (int64_t D : {int64_t{5}, int64_t{64}, int64_t{259}}) {
      Tensor x = random_tensor({4, D}, 7, -2, 2), w = random_tensor({D}, 8, -1, 1);
      w.data<float>()[0] = -0.0f;
      Tensor w1 = w.clone();
      for (int64_t d = 0; d < D; ++d) w1.data<float>()[d] = w.data<float>()[d] + 1.0f;
      Tensor a = Tensor::empty({4, D}, DType::f32), b = a.clone(), c = a.clone(), z = a.clone();
      ops::rms_norm(x, w, 1e-5f, a, 1.0f);
      ops::rms_norm(x, w1, 1e-5f, b);
      EXPECT_TRUE(testing::bitwise_equal(a, b)) << "D=" << D;
      ops::rms_norm(x, w, 1e-5f, c);
      ops::rms_norm(x, w, 1e-5f, z, 0.0f);
      EXPECT_TRUE(testing::bitwise_equal(c, z)) << "D=" << D;
      EXPECT_TRUE(std::signbit(c.data<float>()[0]) != std::signbit(x.data<float>()[0]))
          << "-0 weight kept";
    }
  });
  Tensor x = random_tensor({1, 4}, 1), w = random_tensor({4}, 2),
         out = Tensor::empty({1, 4}, DType::f32);
  EXPECT_THROW(ops::rms_norm(x, w, 1e-5f, out, std::numeric_limits<float>::infinity()), Error);
}

TEST(KernelsPointwise, rms_norm_refuses_wrong_weight_length) {
  Tensor x = random_tensor({2, 8}, 1), w = random_tensor({7}, 2),
         out = Tensor::empty({2, 8}, DType::f32);
  EXPECT_THROW(ops::rms_norm(x, w, 1e-5f, out), Error);
  Tensor w_ok = random_tensor({8}, 3);
  EXPECT_THROW(ops::rms_norm(x, w_ok, -1.0f, out), Error);
}

// cos/sin table as models build it: row p = cos(p * f_i) then sin(p * f_i).
Tensor rope_table(int64_t max_pos, int64_t rot, double theta = 10000.0) {
  Tensor t = Tensor::empty({max_pos, rot}, DType::f32);
  float* p = t.data<float>();
  for (int64_t pos = 0; pos < max_pos; ++pos)
    for (int64_t i = 0; i < rot / 2; ++i) {
      double f = std::pow(theta, -2.0 * double(i) / double(rot));
      p[pos * rot + i] = static_cast<float>(std::cos(pos * f));
      p[pos * rot + rot / 2 + i] = static_cast<float>(std::sin(pos * f));
    }
  return t;
}

Tensor positions_tensor(std::initializer_list<int32_t> values) {
  Tensor t = Tensor::empty({int64_t(values.size())}, DType::i32);
  int64_t i = 0;
  for (int32_t v : values) t.data<int32_t>()[i++] = v;
  return t;
}

TEST(KernelsPointwise, rope_both_styles_match_reference_including_partial_rotation) {
  for_each_isa([] {
    uint32_t seed = 200;
    struct Case {
      int64_t H, hd, rot;
    };
    for (Case c : {Case{1, 2, 2}, Case{3, 64, 64}, Case{2, 128, 128}, Case{4, 34, 34},
                   Case{2, 64, 32}, Case{5, 17, 6}, Case{1, 96, 94}})
      for (auto style : {ops::RopeStyle::interleaved, ops::RopeStyle::neox}) {
        SCOPED_TRACE(::testing::Message() << "H=" << c.H << " hd=" << c.hd << " rot=" << c.rot
                                          << " neox=" << (style == ops::RopeStyle::neox));
        Tensor x = random_tensor({4, c.H, c.hd}, seed++);
        Tensor ref = x.clone();
        Tensor table = rope_table(50, c.rot);
        Tensor pos = positions_tensor({0, 7, 49, 3});
        ops::rope(x, pos, table, style);
        cpu::reference::rope(ref, pos, table, style);
        EXPECT_LT(nmse(x, ref), kNmseF32);
      }
  });
}

TEST(KernelsPointwise, rope_at_position_zero_is_identity_and_styles_differ) {
  Tensor x = random_tensor({1, 2, 8}, 3), table = rope_table(4, 8);
  Tensor y = x.clone();
  ops::rope(y, positions_tensor({0}), table, ops::RopeStyle::neox);
  EXPECT_EQ(nmse(y, x), 0.0);
  Tensor a = x.clone(), b = x.clone();
  ops::rope(a, positions_tensor({3}), table, ops::RopeStyle::neox);
  ops::rope(b, positions_tensor({3}), table, ops::RopeStyle::interleaved);
  EXPECT_GT(nmse(a, b), 1e-3);
}

TEST(KernelsPointwise, rope_refuses_positions_outside_the_table) {
  Tensor x = random_tensor({1, 2, 8}, 3), table = rope_table(4, 8);
  try {
    ops::rope(x, positions_tensor({4}), table, ops::RopeStyle::neox);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("positions[0] = 4"), std::string::npos) << e.what();
  }
  Tensor odd_table = rope_table(4, 8).narrow(1, 0, 7);
  EXPECT_THROW(ops::rope(x, positions_tensor({1}), odd_table, ops::RopeStyle::neox), Error);
}

TEST(KernelsPointwise, softmax_matches_reference_and_handles_masks_and_large_values) {
  for_each_isa([] {
    uint32_t seed = 300;
    for (int64_t D : kSizes) {
      SCOPED_TRACE(::testing::Message() << "D=" << D);
      Tensor x = random_tensor({3, D}, seed++, -30, 30);
      x.data<float>()[0] = 80.0f;  // exp would overflow without the max shift
      if (D > 2) x.data<float>()[D + 1] = -std::numeric_limits<float>::infinity();  // mask
      Tensor ref = x.clone();
      ops::softmax(x);
      cpu::reference::softmax(ref);
      EXPECT_LT(nmse(x, ref), kNmseF32);
      if (D > 2) {
        EXPECT_EQ(x.data<float>()[D + 1], 0.0f);
      }
      for (float v : x.to_floats()) EXPECT_TRUE(std::isfinite(v));
    }
  });
}

TEST(KernelsPointwise, silu_mul_matches_reference_including_large_magnitudes) {
  for_each_isa([] {
    uint32_t seed = 400;
    for (int64_t F : kSizes) {
      SCOPED_TRACE(::testing::Message() << "F=" << F);
      Tensor g = random_tensor({2, F}, seed++, -100, 100), u = random_tensor({2, F}, seed++);
      Tensor out = Tensor::empty({2, F}, DType::f32), ref = Tensor::empty({2, F}, DType::f32);
      ops::silu_mul(g, u, out);
      cpu::reference::silu_mul(g, u, ref);
      EXPECT_LT(nmse(out, ref), kNmseF32);
      for (float v : out.to_floats()) EXPECT_TRUE(std::isfinite(v));
    }
  });
}

// The gated activations read a [T, 2F] matmul output's two halves in place (strided rows)
// and may write into a strided view: the same bits as on contiguous copies, whichever way
// the pool cuts T x F (a chunk may end mid-row).
TEST(KernelsPointwise, gated_activations_read_and_write_strided_rows_bit_for_bit) {
  using Gated = void (*)(const Tensor&, const Tensor&, Tensor&);
  const std::pair<const char*, Gated> ops_under_test[] = {{"silu_mul", &ops::silu_mul},
                                                          {"gelu_tanh_mul", &ops::gelu_tanh_mul},
                                                          {"gelu_erf_mul", &ops::gelu_erf_mul}};
  for_each_isa([&] {
    uint32_t seed = 470;
    for (auto [name, op] : ops_under_test)
      for (auto [T, F] : {std::pair<int64_t, int64_t>{1, 37}, {3, 1000}, {5, 5003}}) {
        SCOPED_TRACE(::testing::Message() << name << " T=" << T << " F=" << F);
        const Tensor gate_up = random_tensor({T, 2 * F}, seed++, -12, 12);
        const Tensor gate = gate_up.narrow(1, 0, F), up = gate_up.narrow(1, F, F);
        ASSERT_EQ(gate.is_contiguous(), T == 1);  // one row: contiguous, the flat path
        Tensor expected = Tensor::empty({T, F}, DType::f32);
        op(gate.contiguous(), up.contiguous(), expected);
        Tensor out = Tensor::empty({T, F}, DType::f32);
        op(gate, up, out);
        Tensor wide = Tensor::empty({T, F + 9}, DType::f32);
        Tensor strided_out = wide.narrow(1, 3, F);
        op(gate, up, strided_out);
        const std::vector<float> want = expected.to_floats(), got = out.to_floats(),
                                 got_strided = strided_out.contiguous().to_floats();
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(want.data(), got_strided.data(), want.size() * sizeof(float)));
        EXPECT_EQ(wide.get({T - 1, 0}), 0.0);  // outside the view: untouched
        EXPECT_EQ(wide.get({0, F + 8}), 0.0);
      }
  });
}

TEST(KernelsPointwise, gelu_tanh_mul_matches_reference_including_tails_and_large_magnitudes) {
  for_each_isa([] {
    uint32_t seed = 450;
    for (int64_t F : kSizes)
      for (float range : {4.0f, 100.0f}) {
        SCOPED_TRACE(::testing::Message() << "F=" << F << " range=" << range);
        Tensor g = random_tensor({3, F}, seed++, -range, range), u = random_tensor({3, F}, seed++);
        Tensor out = Tensor::empty({3, F}, DType::f32), ref = Tensor::empty({3, F}, DType::f32);
        ops::gelu_tanh_mul(g, u, out);
        cpu::reference::gelu_tanh_mul(g, u, ref);
        EXPECT_LT(nmse(out, ref), 1e-10);
        for (float v : out.to_floats()) EXPECT_TRUE(std::isfinite(v));
      }
  });
}

// PyTorch's gelu(approximate="tanh") at a few points (torch.nn.functional.gelu in f64),
// and a row's values do not depend on where the flattened tail falls (batch invariance).
TEST(KernelsPointwise, gelu_tanh_mul_known_values_and_rows_independent_of_batch) {
  const float xs[] = {-3.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 3.0f, 20.0f, -20.0f};
  const double want[] = {-0.0036373920817729943,
                         -0.1588080093917233,
                         -0.15428599017485606,
                         0.0,
                         0.34571400982514394,
                         0.8411919906082768,
                         2.996362607918227,
                         20.0,
                         -0.0};
  Tensor g = Tensor::from_floats({1, 9}, std::vector<float>(std::begin(xs), std::end(xs)));
  Tensor u = Tensor::from_floats({1, 9}, std::vector<float>(9, 1.0f)),
         out = Tensor::empty({1, 9}, DType::f32);
  ops::gelu_tanh_mul(g, u, out);
  for (int i = 0; i < 9; ++i)
    EXPECT_NEAR(out.data<float>()[i], want[i], 2e-6 * (1 + std::fabs(want[i]))) << xs[i];
  for_each_isa([] {
    const int64_t F = 172;
    Tensor gg = random_tensor({5, F}, 31, -5, 5), uu = random_tensor({5, F}, 32);
    Tensor all = Tensor::empty({5, F}, DType::f32);
    ops::gelu_tanh_mul(gg, uu, all);
    for (int64_t t = 0; t < 5; ++t) {
      Tensor one = Tensor::empty({1, F}, DType::f32);
      ops::gelu_tanh_mul(gg.narrow(0, t, 1).contiguous(), uu.narrow(0, t, 1).contiguous(), one);
      EXPECT_TRUE(testing::bitwise_equal(all.narrow(0, t, 1), one)) << "row " << t;
    }
  });
}

// PyTorch's exact gelu (approximate="none", f64) at the same points: far enough from the
// tanh form (3e-4 at -3) that a kernel computing the approximation fails. Rows are
// independent of the batch, as for the other element-wise kernels.
TEST(KernelsPointwise, gelu_erf_mul_known_values_reference_and_rows_independent_of_batch) {
  const float xs[] = {-3.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 3.0f, 20.0f, -20.0f};
  const double want[] = {-0.00404969409489031,
                         -0.15865525393145702,
                         -0.15426876936299344,
                         0.0,
                         0.34573123063700656,
                         0.841344746068543,
                         2.99595030590511,
                         20.0,
                         -0.0};
  Tensor g = Tensor::from_floats({1, 9}, std::vector<float>(std::begin(xs), std::end(xs)));
  Tensor u = Tensor::from_floats({1, 9}, std::vector<float>(9, 1.0f)),
         out = Tensor::empty({1, 9}, DType::f32);
  ops::gelu_erf_mul(g, u, out);
  for (int i = 0; i < 9; ++i)
    EXPECT_NEAR(out.data<float>()[i], want[i], 2e-6 * (1 + std::fabs(want[i]))) << xs[i];
  uint32_t seed = 470;
  for (int64_t F : kSizes) {
    Tensor gg = random_tensor({3, F}, seed++, -8, 8), uu = random_tensor({3, F}, seed++);
    Tensor all = Tensor::empty({3, F}, DType::f32), ref = Tensor::empty({3, F}, DType::f32);
    ops::gelu_erf_mul(gg, uu, all);
    cpu::reference::gelu_erf_mul(gg, uu, ref);
    EXPECT_LT(nmse(all, ref), 1e-12) << "F=" << F;
    for (int64_t t = 0; t < 3; ++t) {
      Tensor one = Tensor::empty({1, F}, DType::f32);
      ops::gelu_erf_mul(gg.narrow(0, t, 1).contiguous(), uu.narrow(0, t, 1).contiguous(), one);
      EXPECT_TRUE(testing::bitwise_equal(all.narrow(0, t, 1), one)) << "row " << t;
    }
  }
}

TEST(KernelsPointwise, scale_matches_reference_exactly_and_may_alias_its_output) {
  for_each_isa([] {
    uint32_t seed = 470;
    for (int64_t D : kSizes) {
      Tensor x = random_tensor({2, D}, seed++, -10, 10), ref = Tensor::empty({2, D}, DType::f32);
      const float s = std::sqrt(2304.0f);
      cpu::reference::scale(x, s, ref);
      Tensor out = Tensor::empty({2, D}, DType::f32);
      ops::scale(x, s, out);
      EXPECT_EQ(nmse(out, ref), 0.0) << "D=" << D;  // one f32 multiply, correctly rounded
      ops::scale(x, s, x);
      EXPECT_TRUE(testing::bitwise_equal(x, out)) << "D=" << D;
    }
  });
  Tensor x = random_tensor({2, 3}, 1), out = Tensor::empty({3, 2}, DType::f32);
  EXPECT_THROW(ops::scale(x, 2.0f, out), Error);
  Tensor same = Tensor::empty({2, 3}, DType::f32);
  EXPECT_THROW(ops::scale(x, std::nanf(""), same), Error);
}

TEST(KernelsPointwise, add_matches_reference_and_may_alias_its_output) {
  for_each_isa([] {
    uint32_t seed = 500;
    for (int64_t D : kSizes) {
      Tensor a = random_tensor({3, D}, seed++), b = random_tensor({3, D}, seed++);
      Tensor ref = Tensor::empty({3, D}, DType::f32);
      cpu::reference::add(a, b, ref);
      ops::add(a, b, a);  // residual update in place
      EXPECT_EQ(nmse(a, ref), 0.0) << "D=" << D;
    }
  });
  Tensor a = random_tensor({3, 4}, 1), b = random_tensor({4, 3}, 2),
         out = Tensor::empty({3, 4}, DType::f32);
  EXPECT_THROW(ops::add(a, b, out), Error);
}

TEST(KernelsPointwise, embedding_matches_reference_for_every_table_dtype) {
  for_each_isa([] {
    uint32_t seed = 600;
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (int64_t D : {1L, 3L, 17L, 64L, 257L}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " D=" << D);
        Tensor table = random_tensor({11, D}, seed++).to(dtype);
        Tensor ids = positions_tensor({10, 0, 3, 3, 7});
        Tensor out = Tensor::empty({5, D}, DType::f32), ref = Tensor::empty({5, D}, DType::f32);
        ops::embedding(table, ids, out);
        cpu::reference::embedding(table, ids, ref);
        EXPECT_EQ(nmse(out, ref), 0.0);  // a lookup and a widening conversion: exact
      }
  });
}

TEST(KernelsPointwise, embedding_refuses_out_of_range_ids_naming_them) {
  Tensor table = random_tensor({5, 4}, 1), out = Tensor::empty({2, 4}, DType::f32);
  for (int32_t bad : {5, -1}) {
    try {
      ops::embedding(table, positions_tensor({1, bad}), out);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ids[1] = " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
}

TEST(KernelsPointwise, outputs_that_are_read_only_are_refused) {
  Tensor a = random_tensor({2, 4}, 1), b = random_tensor({2, 4}, 2);
  Tensor out = Tensor::empty({2, 4}, DType::f32);
  out.set_read_only(true);
  EXPECT_THROW(ops::add(a, b, out), Error);
}

}  // namespace
}  // namespace refit
