// Row-wise and element-wise CPU kernels in Highway SIMD: rms_norm, rope, softmax,
// silu_mul, gelu_tanh_mul, scale, embedding, add. Each is memory-bound; SIMD keeps them a small
// share of a forward pass and the pool splits rows (or elements) when there is enough work.

// Highway needs foreach_target.h right after HWY_TARGET_INCLUDE: not reordered.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/pointwise_cpu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/float_formats.h"

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// out[d] = x[d] * inv_rms * (w[d] + offset) for one row of length D. Offset 0 multiplies by
// w as stored (not by w + 0, which would turn a -0 weight into +0): Llama's bits unchanged.
void RmsNormRow(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, int64_t D, float eps,
                float offset, float* out) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  VF a0 = hn::Zero(df), a1 = hn::Zero(df);
  int64_t d = 0;
  for (; d + 2 * L <= D; d += 2 * L) {
    const VF v0 = hn::LoadU(df, x + d), v1 = hn::LoadU(df, x + d + L);
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
  }
  for (; d + L <= D; d += L) {
    const VF v = hn::LoadU(df, x + d);
    a0 = hn::MulAdd(v, v, a0);
  }
  float ss = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
  for (; d < D; ++d) ss += x[d] * x[d];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
  const VF vinv = hn::Set(df, inv);
  d = 0;
  if (offset == 0.0f) {
    for (; d + L <= D; d += L)
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + d), vinv), hn::LoadU(df, w + d)), df, out + d);
    for (; d < D; ++d) out[d] = x[d] * inv * w[d];
    return;
  }
  // Gemma: (1 + w) in f32, then the normalised value times it.
  const VF voff = hn::Set(df, offset);
  for (; d + L <= D; d += L)
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + d), vinv), hn::Add(hn::LoadU(df, w + d), voff)),
               df, out + d);
  for (; d < D; ++d) out[d] = x[d] * inv * (w[d] + offset);
}

// In-place softmax of one contiguous row.
void SoftmaxRow(float* HWY_RESTRICT x, int64_t D) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  VF vmax = hn::Set(df, -HUGE_VALF);
  int64_t d = 0;
  for (; d + L <= D; d += L) vmax = hn::Max(vmax, hn::LoadU(df, x + d));
  float mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (; d < D; ++d) mx = std::max(mx, x[d]);
  // exp(-inf) must be 0 (masked entries); Highway's Exp is defined down to -FLT_MAX.
  const VF vmx = hn::Set(df, mx), lo = hn::Set(df, -FLT_MAX);
  VF vsum = hn::Zero(df);
  d = 0;
  for (; d + L <= D; d += L) {
    const VF e = hn::Exp(df, hn::Max(hn::Sub(hn::LoadU(df, x + d), vmx), lo));
    hn::StoreU(e, df, x + d);
    vsum = hn::Add(vsum, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
  for (; d < D; ++d) sum += (x[d] = std::exp(x[d] - mx));
  const float inv = 1.0f / sum;
  const VF vinv = hn::Set(df, inv);
  d = 0;
  for (; d + L <= D; d += L) hn::StoreU(hn::Mul(hn::LoadU(df, x + d), vinv), df, x + d);
  for (; d < D; ++d) x[d] *= inv;
}

// silu(g) * u = g / (1 + exp(-g)) * u, lane by lane.
HWY_INLINE VF SiluMulVec(DF df, VF gv, VF uv) {
  // Clamp keeps Exp in its valid range; exp(88) already makes silu(g) ~ -1e-37 * |g|.
  const VF e = hn::Exp(df, hn::Min(hn::Neg(gv), hn::Set(df, 88.0f)));
  return hn::Mul(hn::Div(gv, hn::Add(hn::Set(df, 1.0f), e)), uv);
}

// out = silu(g) * u over n elements (out may be g). The tail goes through the same vector
// arithmetic, padded to a whole vector, not std::exp: callers flatten [T, F], so where the
// tail falls moves with the number of rows T (and with the pool's cuts), and a row's values
// must not (batch invariance: F = 172 left 12 elements of some rows to a different exp).
void SiluMul(const float* g, const float* HWY_RESTRICT u, int64_t n, float* out) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + L <= n; i += L)
    hn::StoreU(SiluMulVec(df, hn::LoadU(df, g + i), hn::LoadU(df, u + i)), df, out + i);
  if (i < n) {
    float gb[HWY_MAX_BYTES / sizeof(float)] = {}, ub[HWY_MAX_BYTES / sizeof(float)] = {};
    const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(gb, g + i, bytes);
    std::memcpy(ub, u + i, bytes);
    hn::StoreU(SiluMulVec(df, hn::LoadU(df, gb), hn::LoadU(df, ub)), df, gb);
    std::memcpy(out + i, gb, bytes);
  }
}

// gelu_tanh(g) * u = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * u, lane by lane.
HWY_INLINE VF GeluTanhMulVec(DF df, VF gv, VF uv) {
  const VF g3 = hn::Mul(hn::Mul(gv, gv), gv);
  VF inner = hn::Mul(hn::Set(df, 0.7978845608028654f), hn::MulAdd(hn::Set(df, 0.044715f), g3, gv));
  // tanh(+-9) is +-1 in f32; the clamp keeps g^3 overflowing to infinity out of Tanh.
  inner = hn::Min(hn::Max(inner, hn::Set(df, -9.0f)), hn::Set(df, 9.0f));
  const VF half_g = hn::Mul(hn::Set(df, 0.5f), gv);
  return hn::Mul(hn::Mul(half_g, hn::Add(hn::Set(df, 1.0f), hn::Tanh(df, inner))), uv);
}

// out = gelu_tanh(g) * u over n elements (out may be g). The tail goes through the same
// vector arithmetic padded to a whole vector, as in SiluMul and for the same reason: where
// the tail falls moves with the number of rows, and a row's values must not.
void GeluTanhMul(const float* g, const float* HWY_RESTRICT u, int64_t n, float* out) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + L <= n; i += L)
    hn::StoreU(GeluTanhMulVec(df, hn::LoadU(df, g + i), hn::LoadU(df, u + i)), df, out + i);
  if (i < n) {
    float gb[HWY_MAX_BYTES / sizeof(float)] = {}, ub[HWY_MAX_BYTES / sizeof(float)] = {};
    const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(gb, g + i, bytes);
    std::memcpy(ub, u + i, bytes);
    hn::StoreU(GeluTanhMulVec(df, hn::LoadU(df, gb), hn::LoadU(df, ub)), df, gb);
    std::memcpy(out + i, gb, bytes);
  }
}

// out = x * s over n elements (out may be x).
void Scale(const float* x, float s, int64_t n, float* out) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const VF vs = hn::Set(df, s);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), vs), df, out + i);
  for (; i < n; ++i) out[i] = x[i] * s;
}

void Add(const float* a, const float* b, int64_t n, float* out) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + L <= n; i += L)
    hn::StoreU(hn::Add(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, out + i);
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

// One embedding row of D elements converted to f32. dtype: 0 f32, 1 f16, 2 bf16.
void EmbeddingRow(int dtype, const void* row, int64_t D, float* out) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t d = 0;
  if (dtype == 0) {
    std::memcpy(out, row, static_cast<size_t>(D) * sizeof(float));
  } else if (dtype == 1) {
    const auto* p = static_cast<const hwy::float16_t*>(row);
    const hn::Rebind<hwy::float16_t, DF> dh;
    for (; d + L <= D; d += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + d)), df, out + d);
    const auto* bits = static_cast<const uint16_t*>(row);
    for (; d < D; ++d) out[d] = f16_to_f32(bits[d]);
  } else {
    const auto* p = static_cast<const hwy::bfloat16_t*>(row);
    const hn::Rebind<hwy::bfloat16_t, DF> dh;
    for (; d + L <= D; d += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + d)), df, out + d);
    const auto* bits = static_cast<const uint16_t*>(row);
    for (; d < D; ++d) out[d] = bf16_to_f32(bits[d]);
  }
}

// Rotates H heads of one token. cs = cos[0..half) then sin[0..half); v_h at x + h*ldh.
// neox pairs (i, i + half); interleaved pairs (2i, 2i + 1), done with a pair swap and
// scratch rows cs_dup = (c0 c0 c1 c1 ...) and sn_sgn = (-s0 s0 -s1 s1 ...).
void RopeToken(float* x, int64_t H, int64_t ldh, const float* HWY_RESTRICT cs, int64_t rot,
               int neox, float* HWY_RESTRICT scratch) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t half = rot / 2;
  const float* c = cs;
  const float* s = cs + half;
  if (neox) {
    for (int64_t h = 0; h < H; ++h) {
      float* v = x + h * ldh;
      int64_t i = 0;
      for (; i + L <= half; i += L) {
        const VF x0 = hn::LoadU(df, v + i), x1 = hn::LoadU(df, v + half + i);
        const VF cv = hn::LoadU(df, c + i), sv = hn::LoadU(df, s + i);
        hn::StoreU(hn::MulSub(x0, cv, hn::Mul(x1, sv)), df, v + i);
        hn::StoreU(hn::MulAdd(x0, sv, hn::Mul(x1, cv)), df, v + half + i);
      }
      for (; i < half; ++i) {
        const float x0 = v[i], x1 = v[half + i];
        v[i] = x0 * c[i] - x1 * s[i];
        v[half + i] = x0 * s[i] + x1 * c[i];
      }
    }
    return;
  }
  float* cd = scratch;
  float* sd = scratch + rot;
  for (int64_t i = 0; i < half; ++i) {
    cd[2 * i] = cd[2 * i + 1] = c[i];
    sd[2 * i] = -s[i];
    sd[2 * i + 1] = s[i];
  }
  for (int64_t h = 0; h < H; ++h) {
    float* v = x + h * ldh;
    int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR  // one-lane target: no pair swap, the loop below does it all
    // L is even, so a vector never splits a pair.
    for (; i + L <= rot; i += L) {
      const VF xv = hn::LoadU(df, v + i);
      const VF swapped = hn::Shuffle2301(xv);
      hn::StoreU(hn::MulAdd(xv, hn::LoadU(df, cd + i), hn::Mul(swapped, hn::LoadU(df, sd + i))), df,
                 v + i);
    }
#endif
    for (; i < rot; i += 2) {
      const float x0 = v[i], x1 = v[i + 1];
      v[i] = x0 * cd[i] + x1 * sd[i];
      v[i + 1] = x1 * cd[i] + x0 * sd[i + 1];
    }
  }
}

}  // namespace refit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"

namespace refit::cpu {
HWY_EXPORT(RmsNormRow);
HWY_EXPORT(SoftmaxRow);
HWY_EXPORT(SiluMul);
HWY_EXPORT(GeluTanhMul);
HWY_EXPORT(Scale);
HWY_EXPORT(Add);
HWY_EXPORT(EmbeddingRow);
HWY_EXPORT(RopeToken);

namespace {
// Below this many elements per chunk, waking a second thread costs more than it saves.
constexpr int64_t kMinElementsPerChunk = 16 * 1024;

int64_t rows_grain(int64_t row_len) {
  return std::max<int64_t>(1, kMinElementsPerChunk / std::max<int64_t>(row_len, 1));
}
}  // namespace

void rms_norm_hwy(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
                  float weight_offset) {
  init_cpu_isa();
  const int64_t T = x.size(0), D = x.size(1);
  const float* xp = x.data<const float>();
  const float* wp = weight.data<const float>();
  float* op = out.data<float>();
  const int64_t ldx = x.stride(0), ldo = out.stride(0);
  parallel_for(
      T,
      [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t)
          HWY_DYNAMIC_DISPATCH(RmsNormRow)(xp + t * ldx, wp, D, eps, weight_offset, op + t * ldo);
      },
      rows_grain(D));
}

void softmax_hwy(Tensor& x) {
  init_cpu_isa();
  const int64_t D = x.size(-1);
  if (D == 0 || x.numel() == 0) return;
  const int64_t rows = x.numel() / D;
  float* xp = x.data<float>();
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) HWY_DYNAMIC_DISPATCH(SoftmaxRow)(xp + r * D, D);
      },
      rows_grain(D));
}

namespace {

// out[i] = row_fn(a, b) element-wise over the whole tensors, split across the pool; the
// chunk boundaries do not change a value (each element is computed alone). Contiguous
// tensors are one run; 2-D ones may have strided rows (stride 1 along each): a gated MLP
// reads the gate and up halves of its one [T, 2F] matmul output in place.
template <class RowFn>
void binary_elementwise(const Tensor& a, const Tensor& b, Tensor& out, RowFn row_fn) {
  init_cpu_isa();
  const int64_t n = a.numel();
  if (n == 0) return;
  const float* ap = a.data<const float>();
  const float* bp = b.data<const float>();
  float* o = out.data<float>();
  const bool flat = a.is_contiguous() && b.is_contiguous() && out.is_contiguous();
  const int64_t F = flat ? n : a.size(1);
  const int64_t lda = flat ? n : a.stride(0), ldb = flat ? n : b.stride(0);
  const int64_t ldo = flat ? n : out.stride(0);
  parallel_for(
      n,
      [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1;) {
          const int64_t r = i / F, c = i % F, len = std::min(i1 - i, F - c);
          row_fn(ap + r * lda + c, bp + r * ldb + c, len, o + r * ldo + c);
          i += len;
        }
      },
      kMinElementsPerChunk);
}

}  // namespace

void silu_mul_hwy(const Tensor& gate, const Tensor& up, Tensor& out) {
  binary_elementwise(gate, up, out, [](const float* g, const float* u, int64_t n, float* o) {
    HWY_DYNAMIC_DISPATCH(SiluMul)(g, u, n, o);
  });
}

void gelu_tanh_mul_hwy(const Tensor& gate, const Tensor& up, Tensor& out) {
  binary_elementwise(gate, up, out, [](const float* g, const float* u, int64_t n, float* o) {
    HWY_DYNAMIC_DISPATCH(GeluTanhMul)(g, u, n, o);
  });
}

// Each element alone through std::erf in f32 (within an ulp or two of the exact value), so a
// row's values do not depend on the chunking: batch-invariant like the SIMD kernels.
void gelu_erf_mul_cpu(const Tensor& gate, const Tensor& up, Tensor& out) {
  binary_elementwise(gate, up, out, [](const float* g, const float* u, int64_t n, float* o) {
    for (int64_t i = 0; i < n; ++i) {
      const float gv = g[i];
      o[i] = 0.5f * gv * (1.0f + std::erf(gv * 0.70710678118654752f)) * u[i];
    }
  });
}

void scale_hwy(const Tensor& x, float s, Tensor& out) {
  binary_elementwise(x, x, out, [s](const float* xp, const float*, int64_t n, float* o) {
    HWY_DYNAMIC_DISPATCH(Scale)(xp, s, n, o);
  });
}

void add_hwy(const Tensor& a, const Tensor& b, Tensor& out) {
  binary_elementwise(a, b, out, [](const float* ap, const float* bp, int64_t n, float* o) {
    HWY_DYNAMIC_DISPATCH(Add)(ap, bp, n, o);
  });
}

void embedding_hwy(const Tensor& table, const Tensor& ids, Tensor& out) {
  init_cpu_isa();
  const int64_t T = ids.size(0), D = table.size(1);
  const int dtype = table.dtype() == DType::f32 ? 0 : table.dtype() == DType::f16 ? 1 : 2;
  const auto* base = static_cast<const uint8_t*>(table.raw_data());
  const size_t row_bytes = dtype_nbytes(table.dtype(), table.stride(0));
  const int32_t* ip = ids.data<const int32_t>();
  const int64_t ids_stride = ids.stride(0);
  float* op = out.data<float>();
  const int64_t ldo = out.stride(0);
  parallel_for(
      T,
      [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t id = ip[t * ids_stride];  // range checked by ops::embedding
          HWY_DYNAMIC_DISPATCH(EmbeddingRow)(dtype, base + id * row_bytes, D, op + t * ldo);
        }
      },
      rows_grain(D));
}

void rope_hwy(Tensor& x, const Tensor& positions, const Tensor& cos_sin, ops::RopeStyle style) {
  init_cpu_isa();
  const int64_t T = x.size(0), H = x.size(1), rot = cos_sin.size(1);
  float* xp = x.data<float>();
  const int32_t* pos = positions.data<const int32_t>();
  const int64_t pos_stride = positions.stride(0);
  const float* cs = cos_sin.data<const float>();
  const int64_t ldcs = cos_sin.stride(0), ldt = x.stride(0), ldh = x.stride(1);
  const int neox = style == ops::RopeStyle::neox ? 1 : 0;
  parallel_for(
      T,
      [&](int64_t t0, int64_t t1, int) {
        thread_local std::vector<float> scratch;
        scratch.resize(static_cast<size_t>(2 * rot));
        for (int64_t t = t0; t < t1; ++t) {
          const float* row = cs + int64_t{pos[t * pos_stride]} * ldcs;  // checked by ops::rope
          HWY_DYNAMIC_DISPATCH(RopeToken)(xp + t * ldt, H, ldh, row, rot, neox, scratch.data());
        }
      },
      rows_grain(H * x.size(2)));
}

}  // namespace refit::cpu
#endif  // HWY_ONCE
