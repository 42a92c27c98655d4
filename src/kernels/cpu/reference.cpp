// Scalar reference kernels (see reference.h). Deliberately naive.
#include "kernels/cpu/reference.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"

namespace refit::cpu::reference {
namespace {

// Element i (in storage elements from raw_data()) of a float tensor of any supported dtype.
double load(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<const float>()[i];
    case DType::f16: return f16_to_f32(t.data<const uint16_t>()[i]);
    case DType::bf16: return bf16_to_f32(t.data<const uint16_t>()[i]);
    default: fail("reference kernel: unsupported dtype {}", dtype_name(t.dtype()));
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

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
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
      op[t * out.stride(0) + d * out.stride(1)] = static_cast<float>(
          xp[t * x.stride(0) + d * x.stride(1)] * inv * wp[d * weight.stride(0)]);
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

void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
               float scale, Tensor& out) {
  const int64_t T = q.size(0), H = q.size(1), hd = q.size(2), KVH = k_cache.size(1);
  const int64_t group = H / KVH;
  const float* qp = q.data<const float>();
  const float* kp = k_cache.data<const float>();
  const float* vp = v_cache.data<const float>();
  float* op = f32_ptr(out);
  std::vector<double> p;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / group, len = start_pos + t + 1;
      p.assign(len, 0.0);
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t s = 0; s < len; ++s) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d)
          dot += double(qp[t * q.stride(0) + h * q.stride(1) + d * q.stride(2)]) *
                 kp[s * k_cache.stride(0) + kvh * k_cache.stride(1) + d * k_cache.stride(2)];
        p[s] = dot * scale;
        mx = std::max(mx, p[s]);
      }
      double sum = 0;
      for (auto& e : p) sum += (e = std::exp(e - mx));
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t s = 0; s < len; ++s)
          acc += p[s] * vp[s * v_cache.stride(0) + kvh * v_cache.stride(1) + d * v_cache.stride(2)];
        op[t * out.stride(0) + h * out.stride(1) + d * out.stride(2)] = static_cast<float>(acc / sum);
      }
    }
}

}  // namespace refit::cpu::reference
