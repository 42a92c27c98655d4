// Scalar reference kernels (see reference.h). Deliberately naive.
#include "kernels/cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"
#include "kernels/quant/quant_reference.h"

namespace refit::cpu::reference {
namespace {

// Element i (in storage elements from raw_data()) of a float tensor of any supported dtype.
double load(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32:
      return t.data<const float>()[i];
    case DType::f16:
      return f16_to_f32(t.data<const uint16_t>()[i]);
    case DType::bf16:
      return bf16_to_f32(t.data<const uint16_t>()[i]);
    default:
      fail("reference kernel: unsupported dtype {}", dtype_name(t.dtype()));
  }
}

float* f32_ptr(Tensor& t) { return t.data<float>(); }

}  // namespace

void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const float* xp = x.data<const float>();
  float* op = f32_ptr(out);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias.defined() ? bias.data<const float>()[n * bias.stride(0)] : 0.0;
      for (int64_t k = 0; k < K; ++k)
        acc += double(xp[m * x.stride(0) + k * x.stride(1)]) *
               load(w, n * w.stride(0) + k * w.stride(1));
      op[m * out.stride(0) + n * out.stride(1)] = static_cast<float>(acc);
    }
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, float weight_offset) {
  const int64_t T = x.size(0), D = x.size(1);
  const float* xp = x.data<const float>();
  const float* wp = weight.data<const float>();
  float* op = f32_ptr(out);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) {
      double v = xp[t * x.stride(0) + d * x.stride(1)];
      ss += v * v;
    }
    double inv = 1.0 / std::sqrt(ss / double(D) + double(eps));
    for (int64_t d = 0; d < D; ++d)
      op[t * out.stride(0) + d * out.stride(1)] =
          static_cast<float>(xp[t * x.stride(0) + d * x.stride(1)] * inv *
                             (double(wp[d * weight.stride(0)]) + double(weight_offset)));
  }
}

void rope(Tensor& x, const Tensor& positions, const Tensor& cos_sin, ops::RopeStyle style) {
  const int64_t T = x.size(0), H = x.size(1), rot = cos_sin.size(1), half = rot / 2;
  float* xp = f32_ptr(x);
  const int32_t* pos = positions.data<const int32_t>();
  const float* cs = cos_sin.data<const float>();
  for (int64_t t = 0; t < T; ++t) {
    const float* row = cs + int64_t(pos[t * positions.stride(0)]) * cos_sin.stride(0);
    for (int64_t h = 0; h < H; ++h) {
      float* v = xp + t * x.stride(0) + h * x.stride(1);
      const int64_t s = x.stride(2);
      for (int64_t i = 0; i < half; ++i) {
        double c = row[i * cos_sin.stride(1)], sn = row[(half + i) * cos_sin.stride(1)];
        int64_t a = style == ops::RopeStyle::interleaved ? 2 * i : i;
        int64_t b = style == ops::RopeStyle::interleaved ? 2 * i + 1 : i + half;
        double x0 = v[a * s], x1 = v[b * s];
        v[a * s] = static_cast<float>(x0 * c - x1 * sn);
        v[b * s] = static_cast<float>(x0 * sn + x1 * c);
      }
    }
  }
}

void softmax(Tensor& x) {
  const int64_t D = x.size(-1), rows = D == 0 ? 0 : x.numel() / D;
  float* xp = f32_ptr(x);
  // Rows are contiguous (ops.h); rows of a contiguous tensor follow each other.
  for (int64_t r = 0; r < rows; ++r) {
    float* v = xp + r * D;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t d = 0; d < D; ++d) mx = std::max(mx, double(v[d]));
    double sum = 0;
    for (int64_t d = 0; d < D; ++d) sum += std::exp(double(v[d]) - mx);
    for (int64_t d = 0; d < D; ++d) v[d] = static_cast<float>(std::exp(double(v[d]) - mx) / sum);
  }
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const int64_t n = gate.numel();
  const float* g = gate.data<const float>();
  const float* u = up.data<const float>();
  float* o = f32_ptr(out);
  for (int64_t i = 0; i < n; ++i) {
    double gv = g[i];
    o[i] = static_cast<float>(gv / (1.0 + std::exp(-gv)) * u[i]);
  }
}

void gelu_erf_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const int64_t n = gate.numel();
  const float* g = gate.data<const float>();
  const float* u = up.data<const float>();
  float* o = f32_ptr(out);
  for (int64_t i = 0; i < n; ++i) {
    const double gv = g[i];
    o[i] = static_cast<float>(0.5 * gv * (1.0 + std::erf(gv / std::sqrt(2.0))) * u[i]);
  }
}

void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const int64_t n = gate.numel();
  const float* g = gate.data<const float>();
  const float* u = up.data<const float>();
  float* o = f32_ptr(out);
  const double c = std::sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < n; ++i) {
    const double gv = g[i];
    o[i] =
        static_cast<float>(0.5 * gv * (1.0 + std::tanh(c * (gv + 0.044715 * gv * gv * gv))) * u[i]);
  }
}

void scale(const Tensor& x, float s, Tensor& out) {
  const int64_t n = x.numel();
  const float* xp = x.data<const float>();
  float* o = f32_ptr(out);
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(double(xp[i]) * double(s));
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t T = ids.size(0), D = table.size(1);
  const int32_t* ip = ids.data<const int32_t>();
  float* op = f32_ptr(out);
  for (int64_t t = 0; t < T; ++t) {
    int64_t id = ip[t * ids.stride(0)];
    for (int64_t d = 0; d < D; ++d)
      op[t * out.stride(0) + d * out.stride(1)] =
          static_cast<float>(load(table, id * table.stride(0) + d * table.stride(1)));
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.numel();
  const float* ap = a.data<const float>();
  const float* bp = b.data<const float>();
  float* op = f32_ptr(out);
  for (int64_t i = 0; i < n; ++i) op[i] = ap[i] + bp[i];
}

namespace {

// One query row over the cache rows lo .. hi of one kv head; key/value element d of row r
// at k(r, d), v(r, d). sinks (optional [H]): head h's logit is one more softmax term whose
// probability is dropped (ops.h).
template <class K, class V>
void attend(const Tensor& q, int64_t t, int64_t h, int64_t lo, int64_t hi, float scale, const K& k,
            const V& v, const Tensor& sinks, Tensor& out) {
  const int64_t hd = q.size(2);
  const float* qp = q.data<const float>();
  std::vector<double> p(static_cast<size_t>(hi - lo + 1));
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t r = lo; r <= hi; ++r) {
    double dot = 0;
    for (int64_t d = 0; d < hd; ++d)
      dot += double(qp[t * q.stride(0) + h * q.stride(1) + d * q.stride(2)]) * k(r, d);
    p[r - lo] = dot * scale;
    mx = std::max(mx, p[r - lo]);
  }
  const bool has_sink = sinks.defined();
  const double sink = has_sink ? double(sinks.get({h})) : 0.0;
  if (has_sink) mx = std::max(mx, sink);
  double sum = 0;
  for (auto& e : p) sum += (e = std::exp(e - mx));
  if (has_sink) sum += std::exp(sink - mx);
  float* op = f32_ptr(out);
  for (int64_t d = 0; d < hd; ++d) {
    double acc = 0;
    for (int64_t r = lo; r <= hi; ++r) acc += p[r - lo] * v(r, d);
    op[t * out.stride(0) + h * out.stride(1) + d * out.stride(2)] = static_cast<float>(acc / sum);
  }
}

// The first key position a query at `pos` sees (ops.h: p - k < window).
int64_t window_start(int64_t pos, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
}

}  // namespace

void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
               float scale, Tensor& out, int64_t window, const Tensor& sinks) {
  const int64_t T = q.size(0), H = q.size(1), KVH = k_cache.size(1);
  const int64_t group = H / KVH;
  const float* kp = k_cache.data<const float>();
  const float* vp = v_cache.data<const float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / group, pos = start_pos + t;
      const auto k = [&](int64_t r, int64_t d) {
        return double(kp[r * k_cache.stride(0) + kvh * k_cache.stride(1) + d * k_cache.stride(2)]);
      };
      const auto v = [&](int64_t r, int64_t d) {
        return double(vp[r * v_cache.stride(0) + kvh * v_cache.stride(1) + d * v_cache.stride(2)]);
      };
      attend(q, t, h, window_start(pos, window), pos, scale, k, v, sinks, out);
    }
}

void paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                     const Tensor& block_tables, const Tensor& query_starts,
                     const Tensor& start_positions, float scale, Tensor& out, int64_t window,
                     const Tensor& sinks) {
  const int64_t H = q.size(1), KVH = k_pool.size(2), bs = k_pool.size(1), group = H / KVH;
  const float* kp = k_pool.data<const float>();
  const float* vp = v_pool.data<const float>();
  for (int64_t b = 0; b < block_tables.size(0); ++b) {
    const int64_t q0 = int64_t(query_starts.get({b})), q1 = int64_t(query_starts.get({b + 1}));
    const int64_t p0 = int64_t(start_positions.get({b}));
    const auto block = [&](int64_t r) { return int64_t(block_tables.get({b, r / bs})); };
    for (int64_t i = q0; i < q1; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kvh = h / group, pos = p0 + (i - q0);
        const auto k = [&](int64_t r, int64_t d) {
          return double(kp[block(r) * k_pool.stride(0) + (r % bs) * k_pool.stride(1) +
                           kvh * k_pool.stride(2) + d * k_pool.stride(3)]);
        };
        const auto v = [&](int64_t r, int64_t d) {
          return double(vp[block(r) * v_pool.stride(0) + (r % bs) * v_pool.stride(1) +
                           kvh * v_pool.stride(2) + d * v_pool.stride(3)]);
        };
        attend(q, i, h, window_start(pos, window), pos, scale, k, v, sinks, out);
      }
  }
}

namespace {

// Byte `b` of code row `n` of a [N, row_bytes] weight in its layout (kernels/matmul_quantized.h,
// kernels/interleave_4x16.h), spelled out from the layouts' definitions.
uint8_t code_byte(const uint8_t* codes, Layout layout, int64_t row_bytes, int64_t n, int64_t b) {
  switch (layout) {
    case Layout::shuffled_16x16: {
      // 16 rows x 32 bytes per tile, stored [2 halves][16 rows][16 bytes].
      const int64_t tile = (n / 16) * (row_bytes / 32) + b / 32;
      return codes[tile * 512 + ((b % 32) / 16) * 256 + (n % 16) * 16 + b % 16];
    }
    case Layout::interleaved_4x16: {
      // Runs of 512 bytes (16 blocks of 32): code 32 i + 4 g + j at 64 g + 4 i + j.
      const int64_t run = b / 512;
      if ((run + 1) * 512 > row_bytes) return codes[n * row_bytes + b];  // the tail stays in place
      const int64_t in = b % 512, i = in / 32, g = (in % 32) / 4, j = in % 4;
      return codes[n * row_bytes + run * 512 + 64 * g + 4 * i + j];
    }
    default:
      return codes[n * row_bytes + b];
  }
}

double scale_of(const Tensor& s, int64_t index) {
  switch (s.dtype()) {
    case DType::f32:
      return s.data<const float>()[index];
    case DType::f16:
      return f16_to_f32(s.data<const uint16_t>()[index]);
    case DType::e8m0:
      return e8m0_to_f32(s.data<const uint8_t>()[index]);
    default:
      fail("reference matmul_quantized: unsupported scale dtype {}", dtype_name(s.dtype()));
  }
}

}  // namespace

void matmul_quantized(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                      const Tensor& w_scale, int64_t group, const Tensor& bias, Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0), S = w_scale.size(1);
  const bool f4 = w.dtype() == DType::f4_e2m1;
  const int64_t row_bytes = f4 ? K / 2 : K;
  const auto* codes = static_cast<const uint8_t*>(w.raw_data());
  // Scales of shuffled f4/i8 codes go tile by tile: g scale columns per 32-byte tile column.
  const bool tiled = w_scale.layout() == Layout::shuffled_16x16;
  const int64_t g = tiled ? 32 * (f4 ? 2 : 1) / group : 1;
  std::vector<double> wd(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t byte = code_byte(codes, w.layout(), row_bytes, n, f4 ? k / 2 : k);
      double v;
      if (f4)
        v = f4_e2m1_to_f32(static_cast<uint8_t>((byte >> (4 * (k & 1))) & 0xF));
      else if (w.dtype() == DType::i8)
        v = static_cast<int8_t>(byte);
      else
        v = f8_e4m3fn_to_f32(byte);
      const int64_t c = k / group;
      const int64_t si =
          tiled ? (((n / 16) * (S / g) + c / g) * 16 + n % 16) * g + c % g : n * S + c;
      wd[static_cast<size_t>(n * K + k)] = v * scale_of(w_scale, si);
    }
  const auto xv = [&](int64_t m, int64_t k) -> double {
    const int64_t i = m * x.stride(0) + k * x.stride(1);
    switch (x.dtype()) {
      case DType::f32:
        return x.data<const float>()[i];
      case DType::f8_e4m3fn:
        return double(f8_e4m3fn_to_f32(static_cast<const uint8_t*>(x.raw_data())[i])) *
               x_scale.data<const float>()[m * x_scale.stride(0)];
      case DType::i8:
        return double(static_cast<const int8_t*>(x.raw_data())[i]) *
               x_scale.data<const float>()[m * x_scale.stride(0) + (k / 32) * x_scale.stride(1)];
      default:
        fail("reference matmul_quantized: unsupported activation dtype {}", dtype_name(x.dtype()));
    }
  };
  float* op = f32_ptr(out);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias.defined() ? bias.data<const float>()[n * bias.stride(0)] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += xv(m, k) * wd[static_cast<size_t>(n * K + k)];
      op[m * out.stride(0) + n * out.stride(1)] = static_cast<float>(acc);
    }
}

void quantize_per_token_fp8(const Tensor& x, Tensor& xq, Tensor& x_scale) {
  const int64_t M = x.size(0), K = x.size(1);
  auto* q = static_cast<uint8_t*>(xq.raw_data());
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0.0f;
    for (int64_t k = 0; k < K; ++k)
      amax = std::max(amax, std::fabs(x.data<const float>()[m * x.stride(0) + k * x.stride(1)]));
    const float s = fp8_group_scale(amax);
    x_scale.data<float>()[m * x_scale.stride(0)] = s;
    for (int64_t k = 0; k < K; ++k)
      q[m * xq.stride(0) + k * xq.stride(1)] =
          f32_to_f8_e4m3fn(x.data<const float>()[m * x.stride(0) + k * x.stride(1)] / s);
  }
}

void quantize_per_block_q8(const Tensor& x, Tensor& xq, Tensor& x_scale) {
  const int64_t M = x.size(0), K = x.size(1);
  auto* q = static_cast<int8_t*>(xq.raw_data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < K / 32; ++b) {
      const auto xv = [&](int64_t k) {
        return x.data<const float>()[m * x.stride(0) + (b * 32 + k) * x.stride(1)];
      };
      bool finite = true;
      float amax = 0.0f;
      for (int64_t k = 0; k < 32; ++k) {
        finite &= std::isfinite(xv(k));
        amax = std::max(amax, std::fabs(xv(k)));
      }
      const float s = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
      const float inv = finite && s > 0.0f ? 1.0f / s : 0.0f;  // llama.cpp's id = 1 / d
      x_scale.data<float>()[m * x_scale.stride(0) + b * x_scale.stride(1)] = s;
      for (int64_t k = 0; k < 32; ++k)
        q[m * xq.stride(0) + (b * 32 + k) * xq.stride(1)] =
            static_cast<int8_t>(std::nearbyint(xv(k) * inv));
    }
}

}  // namespace refit::cpu::reference
