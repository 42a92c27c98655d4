// Case generators of the registry walk; see kernels_walk_cases.h.
#include "kernels_walk_cases.h"

#include <fmt/format.h>

#include <cmath>
#include <random>
#include <tuple>

#include "core/float_formats.h"
#include "kernels/cpu/reference.h"
#include "kernels/matmul_quantized.h"
#include "kernels/op_fns.h"
#include "kernels/op_names.h"
#include "kernels/paged_attention.h"
#include "kernels/quant/quant_scheme.h"
#include "kernels_test_util.h"
#include "weights/layout_transform.h"
#include "weights/parameter.h"

namespace refit::testing::walk {
namespace {

// Tolerances on nmse, by what the kernel's result may differ from the double-precision
// reference in: f32 rounding of its sums (every float op and quantized weights decoded
// exactly), or nothing at all (lookups, one multiply, the quantizers' codes).
constexpr double kF32 = 1e-9;
constexpr double kQuantizedMatmul = 1e-8;  // f32 sums over K up to 1024 of exact products
constexpr double kExact = 1e-12;

Tensor out_like(Shape shape, const Tensor& on) {
  return Tensor::empty(std::move(shape), DType::f32, on.device());
}
Tensor to_cpu(const Tensor& t) {
  return t.device().type == DeviceType::cpu ? t : t.to(Device::cpu());
}

Tensor i32(Shape shape, const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

// cos/sin table as models build it: row p = cos(p * f_i) then sin(p * f_i).
Tensor rope_table(int64_t max_pos, int64_t rot) {
  Tensor t = Tensor::empty({max_pos, rot}, DType::f32);
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < rot / 2; ++i) {
      const double f = std::pow(10000.0, -2.0 * double(i) / double(rot));
      t.data<float>()[p * rot + i] = static_cast<float>(std::cos(double(p) * f));
      t.data<float>()[p * rot + rot / 2 + i] = static_cast<float>(std::sin(double(p) * f));
    }
  return t;
}

// A [rows, cols] view of f32 values whose rows are `pad` elements further apart than
// cols: rows dense, the tensor not contiguous (what the "rows" constraints allow).
Tensor padded_rows(int64_t rows, int64_t cols, int64_t pad, uint32_t seed) {
  Tensor wide = random_tensor({rows, cols + pad}, seed, -2, 2);
  return wide.narrow(1, 0, cols);
}

// Values of quantized activations: f8 codes times the token's scale, or int8 codes times
// their block's scale, as f32 [M, K].
Tensor decoded_activations(const Tensor& xq, const Tensor& scale) {
  const Tensor q = to_cpu(xq), s = to_cpu(scale);
  const int64_t M = q.size(0), K = q.size(1);
  Tensor out = Tensor::empty({M, K}, DType::f32);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t byte = static_cast<const uint8_t*>(q.raw_data())[m * q.stride(0) + k];
      out.data<float>()[m * K + k] =
          q.dtype() == DType::i8
              ? float(static_cast<int8_t>(byte)) * s.data<const float>()[m * s.stride(0) + k / 32]
              : f8_e4m3fn_to_f32(byte) * s.data<const float>()[m];
    }
  return out;
}

// ---- matmul ----

// A weight of `dtype` [N, K] as the engine holds it: a Parameter loaded from f32 values,
// then the layout transform (transpose, shuffle_16x16) applied as a model loader applies it.
Tensor engine_weight(const Tensor& w32, DType dtype, const char* layout) {
  Parameter p("w", w32.shape(), dtype);
  p.load(w32);
  if (std::string(layout) == "transposed") p.apply_transform(LayoutTransform::transpose);
  if (std::string(layout) == "shuffled") p.apply_transform(LayoutTransform::shuffle_16x16);
  return p.matmul_view();  // shares the parameter's storage, which outlives the Parameter
}

Case matmul_case(std::string label, Tensor x, Tensor w, Tensor bias) {
  Case c;
  c.label = std::move(label);
  c.args = {x, w, bias, Tensor()};
  Tensor ref = Tensor::empty({x.size(0), w.size(0)}, DType::f32);
  Tensor w_plain = w;
  if (w.layout() == Layout::shuffled_16x16) w_plain = unshuffle_16x16(w);
  cpu::reference::matmul(x, w_plain, bias, ref);
  c.expected = ref;
  c.tolerance = kF32;
  c.args[3] = Tensor::empty({x.size(0), w.size(0)}, DType::f32);
  c.run = [](const void* fn, const std::vector<Tensor>& a) {
    Tensor out = out_like({a[0].size(0), a[1].size(0)}, a[0]);
    reinterpret_cast<kernels::MatmulFn>(fn)(a[0], a[1], a[2], out);
    return to_cpu(out);
  };
  return c;
}

std::vector<Case> matmul_cases() {
  std::vector<Case> cases;
  uint32_t seed = 1;
  struct Shape3 {
    int64_t M, N, K;
  };
  // Smallest, decode limit (M 4 / 5), odd tails, the shuffle boundary (N 16, K 32) just met,
  // a larger one.
  for (Shape3 s :
       {Shape3{1, 1, 1}, Shape3{4, 16, 32}, Shape3{5, 33, 65}, Shape3{17, 48, 96}, Shape3{3, 1, 7}})
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (const char* layout : {"plain", "transposed", "shuffled"}) {
        if (std::string(layout) == "shuffled" && (s.N % 16 != 0 || s.K % 32 != 0)) continue;
        const Tensor w32 = random_tensor({s.N, s.K}, seed++, -1, 1);
        const Tensor x = random_tensor({s.M, s.K}, seed++, -1, 1);
        const bool with_bias = (seed % 2) == 0;
        const Tensor bias = with_bias ? random_tensor({s.N}, seed++) : Tensor();
        cases.push_back(matmul_case(fmt::format("M{} N{} K{} {} {}{}", s.M, s.N, s.K,
                                                dtype_name(dt), layout, with_bias ? " bias" : ""),
                                    x, engine_weight(w32, dt, layout), bias));
      }
  // Views: x rows apart (dense rows), and a weight with no unit stride at all (every
  // other element of a wider buffer): only the strided fallback reads it.
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = padded_rows(3, 40, 8, seed++);
    Tensor wide = random_tensor({6, 80}, seed++).to(dt);
    Tensor skip = Tensor::from_storage(wide.storage(), dt, {6, 40}, {80, 2});
    cases.push_back(matmul_case(fmt::format("strided x, every-other-column w {}", dtype_name(dt)),
                                x, skip, Tensor()));
    Tensor padded = padded_rows(6, 40, 3, seed++).contiguous().to(dt);
    Tensor bias = random_tensor({6}, seed++);
    cases.push_back(
        matmul_case(fmt::format("strided x, padded-row w {}", dtype_name(dt)), x, padded, bias));
  }
  return cases;
}

// ---- matmul_quantized and the activation quantizers ----

Case quantized_case(std::string label, Tensor x, Tensor x_scale, Tensor w, Tensor w_scale,
                    int64_t group, Tensor bias) {
  Case c;
  c.label = std::move(label);
  const int64_t M = x.size(0), N = w.size(0);
  c.args = {x, x_scale, w, w_scale, bias, Tensor::empty({M, N}, DType::f32)};
  Tensor ref = Tensor::empty({M, N}, DType::f32);
  cpu::reference::matmul_quantized(x, x_scale, w, w_scale, group, bias, ref);
  c.expected = ref;
  c.tolerance = kQuantizedMatmul;
  c.run = [group](const void* fn, const std::vector<Tensor>& a) {
    Tensor out = out_like({a[0].size(0), a[2].size(0)}, a[0]);
    reinterpret_cast<kernels::MatmulQuantizedFn>(fn)(a[0], a[1], a[2], a[3], group, a[4], out);
    return to_cpu(out);
  };
  return c;
}

std::vector<Case> matmul_quantized_cases() {
  std::vector<Case> cases;
  uint32_t seed = 100;
  struct Scheme {
    const char* name;
    std::vector<const char*> layouts;
  };
  const Scheme schemes[] = {
      {"fp8-channel", {"plain", "shuffled"}},
      {"fp8-block", {"plain", "shuffled"}},
      {"fp8-channel-w8a8", {"plain", "shuffled"}},
      {"fp8-block-w8a8", {"plain"}},
      {"mxfp4", {"plain", "shuffled"}},
      {"mxfp4-w8a8", {"plain", "shuffled"}},
      {"q8_0", {"plain", "shuffled"}},
      {"q8_0-w8a8", {"plain", "shuffled", "interleaved"}},
  };
  struct Shape3 {
    int64_t M, N, K;
  };
  // One 16 x 32-byte tile and K 64 (the packed-f4 tile boundary); an interleave run plus a
  // tail of one block (K 544 = 512 + 32); AMX's batch threshold (M 16) and one past it.
  for (const Scheme& sc : schemes)
    for (Shape3 s : {Shape3{1, 16, 64}, Shape3{3, 48, 544}, Shape3{17, 32, 1024}})
      for (const char* layout : sc.layouts) {
        const QuantScheme scheme = parse_quant_scheme(sc.name);
        if (!scheme.unsupported_reason(s.K).empty()) continue;
        Parameter p("w", {s.N, s.K}, DType::f32);
        p.set_quantization(scheme);
        if (std::string(layout) != "plain") {
          const LayoutTransform t = std::string(layout) == "shuffled"
                                        ? LayoutTransform::shuffle_16x16
                                        : LayoutTransform::interleave_4x16;
          if (!p.transform_unsupported_reason(t).empty())
            continue;  // e.g. packed f4 rows of 272 bytes
          p.apply_transform(t);
        }
        p.load(random_tensor({s.N, s.K}, seed++, -2, 2));
        const Tensor x32 = random_tensor({s.M, s.K}, seed++, -3, 3);
        Tensor x = x32, xs;
        if (scheme.w8a8 && scheme.int8_activations()) {
          x = Tensor::empty({s.M, s.K}, DType::i8);
          xs = Tensor::empty({s.M, s.K / 32}, DType::f32);
          ops::quantize_per_block_q8(x32, x, xs);
        } else if (scheme.w8a8) {
          x = Tensor::empty({s.M, s.K}, DType::f8_e4m3fn);
          xs = Tensor::empty({s.M}, DType::f32);
          ops::quantize_per_token_fp8(x32, x, xs);
        }
        const Tensor bias = s.M == 3 ? random_tensor({s.N}, seed++) : Tensor();
        cases.push_back(
            quantized_case(fmt::format("{} {} M{} N{} K{}", sc.name, layout, s.M, s.N, s.K), x, xs,
                           p.matmul_view(), p.scale(), p.scale_group(), bias));
      }
  // Packed f4 whose K is not a multiple of 32 (the SIMD kernels refuse it): codes and e8m0
  // scales made directly, since no weight scheme stores such a row.
  for (int64_t K : {int64_t{2}, int64_t{48}}) {
    const int64_t N = 5, S = (K + 31) / 32;
    std::mt19937 rng(static_cast<uint32_t>(K));
    Tensor codes = Tensor::empty({N, K}, DType::f4_e2m1),
           scales = Tensor::empty({N, S}, DType::e8m0);
    for (int64_t i = 0; i < N * K / 2; ++i)
      static_cast<uint8_t*>(codes.raw_data())[i] = static_cast<uint8_t>(rng());
    for (int64_t i = 0; i < N * S; ++i)
      static_cast<uint8_t*>(scales.raw_data())[i] = static_cast<uint8_t>(120 + rng() % 12);
    cases.push_back(quantized_case(fmt::format("mxfp4 K{} (not a multiple of 32)", K),
                                   random_tensor({2, K}, seed++), Tensor(), codes, scales, 32,
                                   Tensor()));
  }
  return cases;
}

Case quantizer_case(std::string label, Tensor x, DType code, Shape scale_shape,
                    void (*reference)(const Tensor&, Tensor&, Tensor&)) {
  Case c;
  c.label = std::move(label);
  Tensor xq = Tensor::empty(x.shape(), code), xs = Tensor::empty(scale_shape, DType::f32);
  c.args = {x, xq, xs};
  reference(x, xq, xs);
  c.expected = decoded_activations(xq, xs);
  c.tolerance = kExact;
  c.run = [code, scale_shape](const void* fn, const std::vector<Tensor>& a) {
    Tensor q = Tensor::empty(a[0].shape(), code, a[0].device()),
           s = Tensor::empty(scale_shape, DType::f32, a[0].device());
    reinterpret_cast<kernels::QuantizePerTokenFn>(fn)(a[0], q, s);
    return decoded_activations(q, s);
  };
  return c;
}

std::vector<Case> quantize_per_token_fp8_cases() {
  std::vector<Case> cases;
  uint32_t seed = 200;
  for (int64_t M : {1, 5})
    for (int64_t K : {1, 33, 256}) {
      Tensor x = random_tensor({M, K}, seed++, -50, 50);
      if (M > 1)
        for (int64_t k = 0; k < K; ++k) x.set({1, k}, 0.0);  // an all-zero token
      cases.push_back(quantizer_case(fmt::format("M{} K{}", M, K), x, DType::f8_e4m3fn, {M},
                                     &cpu::reference::quantize_per_token_fp8));
    }
  return cases;
}

std::vector<Case> quantize_per_block_q8_cases() {
  std::vector<Case> cases;
  uint32_t seed = 300;
  for (int64_t M : {1, 4})
    for (int64_t K : {32, 96, 1024}) {
      Tensor x = random_tensor({M, K}, seed++, -5, 5);
      for (int64_t k = 0; k < 32; ++k) x.set({M - 1, k}, 0.0);  // an all-zero block
      cases.push_back(quantizer_case(fmt::format("M{} K{}", M, K), x, DType::i8, {M, K / 32},
                                     &cpu::reference::quantize_per_block_q8));
    }
  return cases;
}

// ---- row-wise and element-wise ops ----

const int64_t kLengths[] = {1, 15, 17, 64, 4099};

std::vector<Case> rms_norm_cases() {
  std::vector<Case> cases;
  uint32_t seed = 400;
  for (int64_t T : {1, 3})
    for (int64_t D : kLengths)
      for (float offset : {0.0f, 1.0f}) {
        const Tensor x =
            T == 3 ? padded_rows(T, D, 5, seed++) : random_tensor({T, D}, seed++, -3, 3);
        const Tensor w = random_tensor({D}, seed++, -1, 1);
        Case c;
        c.label = fmt::format("T{} D{} offset {}{}", T, D, offset, T == 3 ? " rows apart" : "");
        c.args = {x, w, Tensor::empty({T, D}, DType::f32)};
        c.expected = Tensor::empty({T, D}, DType::f32);
        cpu::reference::rms_norm(x, w, 1e-6f, c.expected, offset);
        c.tolerance = kF32;
        c.run = [offset](const void* fn, const std::vector<Tensor>& a) {
          Tensor out = out_like(a[0].shape(), a[0]);
          reinterpret_cast<kernels::RmsNormFn>(fn)(a[0], a[1], 1e-6f, out, offset);
          return to_cpu(out);
        };
        cases.push_back(std::move(c));
      }
  return cases;
}

std::vector<Case> rope_cases() {
  std::vector<Case> cases;
  uint32_t seed = 500;
  struct Dims {
    int64_t H, hd, rot;
  };
  for (Dims d : {Dims{1, 2, 2}, Dims{3, 64, 64}, Dims{5, 17, 6}, Dims{2, 128, 96}})
    for (auto style : {ops::RopeStyle::interleaved, ops::RopeStyle::neox}) {
      const int64_t max_pos = 40;
      const Tensor x = random_tensor({4, d.H, d.hd}, seed++);
      const Tensor table = rope_table(max_pos, d.rot);
      const Tensor pos = i32({4}, {0, 7, int32_t(max_pos - 1), 3});  // the table's last row
      Case c;
      c.label = fmt::format("H{} hd{} rot{} {}", d.H, d.hd, d.rot,
                            style == ops::RopeStyle::neox ? "neox" : "interleaved");
      c.args = {x, pos, table};
      c.expected = x.clone();
      cpu::reference::rope(c.expected, pos, table, style);
      c.tolerance = kF32;
      c.run = [style](const void* fn, const std::vector<Tensor>& a) {
        Tensor y = to_cpu(a[0]).clone();  // rope works in place: on a copy
        if (a[0].device().type != DeviceType::cpu) y = y.to(a[0].device());
        reinterpret_cast<kernels::RopeFn>(fn)(y, a[1], a[2], style);
        return to_cpu(y);
      };
      cases.push_back(std::move(c));
    }
  return cases;
}

std::vector<Case> softmax_cases() {
  std::vector<Case> cases;
  uint32_t seed = 600;
  for (int64_t D : {1, 17, 1000}) {
    Tensor x = random_tensor({3, D}, seed++, -30, 30);
    x.data<float>()[0] = 80.0f;                     // exp overflows without the max shift
    if (D > 2) x.data<float>()[D + 1] = -INFINITY;  // a masked entry
    Case c;
    c.label = fmt::format("D{}", D);
    c.args = {x};
    c.expected = x.clone();
    cpu::reference::softmax(c.expected);
    c.tolerance = kF32;
    c.run = [](const void* fn, const std::vector<Tensor>& a) {
      Tensor y = to_cpu(a[0]).clone();
      if (a[0].device().type != DeviceType::cpu) y = y.to(a[0].device());
      reinterpret_cast<kernels::SoftmaxFn>(fn)(y);
      return to_cpu(y);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

using Binary = void (*)(const Tensor&, const Tensor&, Tensor&);

// gate/up-style ops: out = f(a, b) elementwise over [T, F].
std::vector<Case> binary_cases(Binary reference, float range, uint32_t seed) {
  std::vector<Case> cases;
  for (int64_t T : {1, 3})
    for (int64_t F : kLengths) {
      const Tensor a = random_tensor({T, F}, seed++, -range, range),
                   b = random_tensor({T, F}, seed++);
      Case c;
      c.label = fmt::format("T{} F{}", T, F);
      c.args = {a, b, Tensor::empty({T, F}, DType::f32)};
      c.expected = Tensor::empty({T, F}, DType::f32);
      reference(a, b, c.expected);
      c.tolerance = kF32;
      c.run = [](const void* fn, const std::vector<Tensor>& x) {
        Tensor out = out_like(x[0].shape(), x[0]);
        reinterpret_cast<Binary>(fn)(x[0], x[1], out);
        return to_cpu(out);
      };
      cases.push_back(std::move(c));
    }
  return cases;
}

std::vector<Case> scale_cases() {
  std::vector<Case> cases;
  uint32_t seed = 700;
  for (int64_t D : kLengths) {
    const Tensor x = random_tensor({2, D}, seed++, -10, 10);
    const float s = std::sqrt(float(D));
    Case c;
    c.label = fmt::format("D{} s{}", D, s);
    c.args = {x, Tensor::empty({2, D}, DType::f32)};
    c.expected = Tensor::empty({2, D}, DType::f32);
    cpu::reference::scale(x, s, c.expected);
    c.tolerance = kExact;
    c.run = [s](const void* fn, const std::vector<Tensor>& a) {
      Tensor out = out_like(a[0].shape(), a[0]);
      reinterpret_cast<kernels::ScaleFn>(fn)(a[0], s, out);
      return to_cpu(out);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> embedding_cases() {
  std::vector<Case> cases;
  uint32_t seed = 800;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t D : {int64_t{1}, int64_t{17}, int64_t{257}}) {
      const Tensor table = random_tensor({11, D}, seed++).to(dt);
      const Tensor ids = i32({5}, {10, 0, 3, 3, 7});  // first and last rows
      Case c;
      c.label = fmt::format("{} D{}", dtype_name(dt), D);
      c.args = {table, ids, Tensor::empty({5, D}, DType::f32)};
      c.expected = Tensor::empty({5, D}, DType::f32);
      cpu::reference::embedding(table, ids, c.expected);
      c.tolerance = kExact;
      c.run = [](const void* fn, const std::vector<Tensor>& a) {
        Tensor out = out_like({a[1].size(0), a[0].size(1)}, a[0]);
        reinterpret_cast<kernels::EmbeddingFn>(fn)(a[0], a[1], out);
        return to_cpu(out);
      };
      cases.push_back(std::move(c));
    }
  return cases;
}

// ---- attention ----

struct AttentionDims {
  int64_t T, start, H, KVH, hd, window;
};
// Decode and prefill, GQA ratios 1, 2, 3, 4 and 8, head_dim 1 .. 256 with odd ones, windows
// of one position, a few, and exactly the positions seen (no cut).
const AttentionDims kAttention[] = {
    {1, 0, 1, 1, 1, 0},       {1, 37, 8, 2, 64, 0}, {5, 3, 4, 1, 17, 2},   {17, 3, 6, 3, 33, 5},
    {3, 100, 2, 2, 128, 103}, {2, 10, 8, 1, 16, 1}, {1, 20, 4, 4, 256, 8}, {6, 0, 8, 2, 80, 0}};

// Attention sinks [H] that matter: per head alternately far above the scores (most of the
// probability goes to the sink), far below (none does), and about their size.
Tensor attention_sinks(int64_t H) {
  Tensor s = Tensor::empty({H}, DType::f32);
  const float values[] = {6.0f, -30.0f, 0.5f, 3.0f};
  for (int64_t h = 0; h < H; ++h) s.data<float>()[h] = values[h % 4];
  return s;
}

std::vector<Case> attention_cases() {
  std::vector<Case> cases;
  uint32_t seed = 900;
  for (const bool with_sinks : {false, true})
    for (const AttentionDims& d : kAttention) {
      const int64_t S = d.start + d.T + 2;  // rows past the last position are never read
      const Tensor q = random_tensor({d.T, d.H, d.hd}, seed++, -2, 2);
      const Tensor k = random_tensor({S, d.KVH, d.hd}, seed++, -2, 2),
                   v = random_tensor({S, d.KVH, d.hd}, seed++);
      const Tensor sinks = with_sinks ? attention_sinks(d.H) : Tensor();
      const float scale = 1.0f / std::sqrt(float(d.hd));
      Case c;
      c.label = fmt::format("T{} start{} H{} KVH{} hd{} window{}{}", d.T, d.start, d.H, d.KVH, d.hd,
                            d.window, with_sinks ? " sinks" : "");
      c.args = {q, k, v, Tensor::empty(q.shape(), DType::f32), sinks};
      c.expected = Tensor::empty(q.shape(), DType::f32);
      cpu::reference::attention(q, k, v, d.start, scale, c.expected, d.window, sinks);
      c.tolerance = kF32;
      const int64_t start = d.start, window = d.window;
      c.run = [start, scale, window](const void* fn, const std::vector<Tensor>& a) {
        Tensor out = out_like(a[0].shape(), a[0]);
        reinterpret_cast<kernels::AttentionFn>(fn)(a[0], a[1], a[2], start, scale, out, window,
                                                   a[4]);
        return to_cpu(out);
      };
      cases.push_back(std::move(c));
    }
  return cases;
}

std::vector<Case> paged_attention_cases() {
  std::vector<Case> cases;
  uint32_t seed = 1000;
  struct Paged {
    int64_t bs, H, KVH, hd, window;
  };
  for (const bool with_sinks : {false, true})
    for (Paged d : {Paged{1, 2, 1, 8, 0}, Paged{4, 4, 2, 24, 0}, Paged{4, 8, 2, 17, 3},
                    Paged{16, 4, 4, 64, 5}}) {
      // Two sequences: 3 new tokens at 9..11 and one at 13 (decode), blocks scattered in a pool.
      const int64_t need0 = (12 + d.bs - 1) / d.bs, need1 = (14 + d.bs - 1) / d.bs;
      const int64_t n_blocks = need0 + need1 + 1, max_blocks = std::max(need0, need1);
      std::vector<int32_t> table(static_cast<size_t>(2 * max_blocks), -1);
      for (int64_t j = 0; j < need0; ++j) table[j] = static_cast<int32_t>(n_blocks - 1 - j);
      for (int64_t j = 0; j < need1; ++j) table[max_blocks + j] = static_cast<int32_t>(j);
      const Tensor k = random_tensor({n_blocks, d.bs, d.KVH, d.hd}, seed++, -2, 2);
      const Tensor v = random_tensor({n_blocks, d.bs, d.KVH, d.hd}, seed++);
      const Tensor q = random_tensor({4, d.H, d.hd}, seed++, -2, 2);
      const Tensor tables = i32({2, max_blocks}, table), starts = i32({3}, {0, 3, 4}),
                   positions = i32({2}, {9, 13});
      const Tensor sinks = with_sinks ? attention_sinks(d.H) : Tensor();
      const float scale = 0.25f;
      Case c;
      c.label = fmt::format("block {} H{} KVH{} hd{} window{}{}", d.bs, d.H, d.KVH, d.hd, d.window,
                            with_sinks ? " sinks" : "");
      c.args = {q, k, v, tables, starts, positions, Tensor::empty(q.shape(), DType::f32), sinks};
      c.expected = Tensor::empty(q.shape(), DType::f32);
      cpu::reference::paged_attention(q, k, v, tables, starts, positions, scale, c.expected,
                                      d.window, sinks);
      c.tolerance = kF32;
      const int64_t window = d.window;
      c.run = [scale, window](const void* fn, const std::vector<Tensor>& a) {
        Tensor out = out_like(a[0].shape(), a[0]);
        reinterpret_cast<kernels::PagedAttentionFn>(fn)(a[0], a[1], a[2], a[3], a[4], a[5], scale,
                                                        out, window, a[7]);
        return to_cpu(out);
      };
      cases.push_back(std::move(c));
    }
  return cases;
}

// Router: both scorings, renormalised or not, k from 1 to E, and a row of equal logits (the
// lowest indices win). The result compared is the weights, then the ids as floats.
std::vector<Case> moe_route_cases() {
  std::vector<Case> cases;
  uint32_t seed = 1400;
  struct R {
    ops::RouterScoring scoring;
    bool renormalize;
    const char* name;
  };
  for (R r : {R{ops::RouterScoring::softmax_topk, true, "softmax_topk renorm"},
              R{ops::RouterScoring::softmax_topk, false, "softmax_topk"},
              R{ops::RouterScoring::topk_softmax, false, "topk_softmax"}})
    for (auto [E, k] : {std::pair<int64_t, int64_t>{8, 2}, {8, 4}, {5, 1}, {3, 3}, {128, 8}}) {
      const int64_t T = 4;
      Tensor logits = random_tensor({T, E}, seed++, -4, 4);
      for (int64_t e = 0; e < E; ++e) logits.data<float>()[E + e] = 0.5f;  // row 1: all tied
      Case c;
      c.label = fmt::format("{} E{} k{}", r.name, E, k);
      c.args = {logits, Tensor::empty({T, k}, DType::i32), Tensor::empty({T, k}, DType::f32)};
      Tensor ids = Tensor::empty({T, k}, DType::i32), w = Tensor::empty({T, k}, DType::f32);
      cpu::reference::moe_route(logits, k, r.scoring, r.renormalize, ids, w);
      c.expected = Tensor::empty({2, T, k}, DType::f32);
      for (int64_t i = 0; i < T * k; ++i) {
        c.expected.data<float>()[i] = w.data<float>()[i];
        c.expected.data<float>()[T * k + i] = static_cast<float>(ids.data<int32_t>()[i]);
      }
      c.tolerance = kF32;
      c.run = [r, k](const void* fn, const std::vector<Tensor>& a) {
        const int64_t rows = a[0].size(0);
        Tensor ids = Tensor::empty({rows, k}, DType::i32, a[0].device());
        Tensor w = out_like({rows, k}, a[0]);
        reinterpret_cast<kernels::MoeRouteFn>(fn)(a[0], k, r.scoring, r.renormalize, ids, w);
        ids = to_cpu(ids);
        w = to_cpu(w);
        Tensor out = Tensor::empty({2, rows, k}, DType::f32);
        for (int64_t i = 0; i < rows * k; ++i) {
          out.data<float>()[i] = w.data<float>()[i];
          out.data<float>()[rows * k + i] = static_cast<float>(ids.data<int32_t>()[i]);
        }
        return out;
      };
      cases.push_back(std::move(c));
    }
  return cases;
}

std::vector<Case> moe_combine_cases() {
  std::vector<Case> cases;
  uint32_t seed = 1500;
  for (auto [T, k, D] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 2, 17}, {5, 4, 128}}) {
    const Tensor y = random_tensor({T, k, D}, seed++, -3, 3), w = random_tensor({T, k}, seed++);
    Case c;
    c.label = fmt::format("T{} k{} D{}", T, k, D);
    c.args = {y, w, Tensor::empty({T, D}, DType::f32)};
    c.expected = Tensor::empty({T, D}, DType::f32);
    cpu::reference::moe_combine(y, w, c.expected);
    c.tolerance = kF32;
    c.run = [](const void* fn, const std::vector<Tensor>& a) {
      Tensor out = out_like({a[0].size(0), a[0].size(2)}, a[0]);
      reinterpret_cast<kernels::MoeCombineFn>(fn)(a[0], a[1], out);
      return to_cpu(out);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// Values reach +-12, past the limit of 7, so both clamps act.
std::vector<Case> swiglu_oai_cases() {
  std::vector<Case> cases;
  uint32_t seed = 1600;
  for (int64_t F : kLengths) {
    const Tensor g = random_tensor({2, F}, seed++, -12, 12),
                 u = random_tensor({2, F}, seed++, -12, 12);
    Case c;
    c.label = fmt::format("F{}", F);
    c.args = {g, u, Tensor::empty({2, F}, DType::f32)};
    c.expected = Tensor::empty({2, F}, DType::f32);
    cpu::reference::swiglu_oai_mul(g, u, 1.702f, 7.0f, c.expected);
    c.tolerance = kF32;
    c.run = [](const void* fn, const std::vector<Tensor>& a) {
      Tensor out = out_like(a[0].shape(), a[0]);
      reinterpret_cast<kernels::SwigluOaiMulFn>(fn)(a[0], a[1], 1.702f, 7.0f, out);
      return to_cpu(out);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace

const std::map<std::string, Generator>& generators() {
  static const std::map<std::string, Generator> table = {
      {op_names::matmul, matmul_cases},
      {op_names::matmul_quantized, matmul_quantized_cases},
      {op_names::quantize_per_token_fp8, quantize_per_token_fp8_cases},
      {op_names::quantize_per_block_q8, quantize_per_block_q8_cases},
      {op_names::rms_norm, rms_norm_cases},
      {op_names::rope, rope_cases},
      {op_names::softmax, softmax_cases},
      {op_names::silu_mul, [] { return binary_cases(&cpu::reference::silu_mul, 100.0f, 1100); }},
      {op_names::gelu_tanh_mul,
       [] { return binary_cases(&cpu::reference::gelu_tanh_mul, 12.0f, 1200); }},
      {op_names::gelu_erf_mul,
       [] { return binary_cases(&cpu::reference::gelu_erf_mul, 12.0f, 1250); }},
      {op_names::scale, scale_cases},
      {op_names::embedding, embedding_cases},
      {op_names::add, [] { return binary_cases(&cpu::reference::add, 1.0f, 1300); }},
      {op_names::attention, attention_cases},
      {op_names::paged_attention, paged_attention_cases},
      {op_names::moe_route, moe_route_cases},
      {op_names::moe_combine, moe_combine_cases},
      {op_names::swiglu_oai_mul, swiglu_oai_cases},
  };
  return table;
}

}  // namespace refit::testing::walk
