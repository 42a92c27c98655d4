// Integer-dot W8A8 matmul for Q8_0 and MXFP4 weights (definition in matmul_int8_dot.h):
// the scalar kernel that is the definition, the wrapper that runs the AVX-512 VNNI kernel
// (matmul_int8_dot_avx512.cpp) over tiles, the activation quantizer, and their dispatch rows.
#include "kernels/cpu/matmul_int8_dot.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/op_names.h"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/cpu_features.h"
#include "core/float_formats.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul_quantized_rows.h"
#include "kernels/interleave_4x16.h"
#include "kernels/matmul_quantized.h"

namespace refit::cpu::int8dot {
namespace {

int64_t scale_bytes(Weights kind) { return kind == Weights::q8_0 ? 2 : 1; }

// Twice the e2m1 value of each nibble: an integer.
constexpr int8_t kF4Twice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Weight scale of one block as the definition takes it.
float weight_scale(Weights kind, const uint8_t* scales, int64_t i) {
  if (kind == Weights::q8_0) {
    uint16_t bits;
    std::memcpy(&bits, scales + 2 * i, 2);
    return f16_to_f32(bits);
  }
  return e8m0_to_f32(scales[i]) * 0.5f;
}

// The definition, for one activation row and one plain weight row.
float row_dot_definition(const Operands& op, int64_t m, const uint8_t* w, const uint8_t* scales) {
  const int8_t* x = op.xq + m * op.ldxq;
  const float* xd = op.xd + m * op.ldxd;
  float acc[kLanes] = {};
  for (int64_t b = 0; b < op.S; ++b) {
    int32_t isum = 0;
    for (int64_t k = b * kBlock; k < (b + 1) * kBlock; ++k) {
      const int32_t wi = op.kind == Weights::q8_0 ? static_cast<int8_t>(w[k])
                                                  : kF4Twice[(w[k / 2] >> (4 * (k & 1))) & 15];
      isum += wi * x[k];
    }
    const float s = xd[b] * weight_scale(op.kind, scales, b);
    acc[b % kLanes] = std::fma(static_cast<float>(isum), s, acc[b % kLanes]);
  }
  for (int64_t h = kLanes / 2; h >= 1; h /= 2)
    for (int64_t i = 0; i < h; ++i) acc[i] = acc[i] + acc[i + h];
  return acc[0];
}

void tile_definition(const Operands& op, const Tile& t) {
  const auto* scales = static_cast<const uint8_t*>(t.scales);
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t m = 0; m < op.M; ++m) {
      const float v = row_dot_definition(op, m, t.codes + r * t.row_bytes,
                                         scales + r * op.S * scale_bytes(op.kind));
      op.out[m * op.ldo + t.n0 + r] = op.bias ? v + op.bias[t.n0 + r] : v;
    }
}

// Tile t of a shuffled_16x16 weight in plain layout: codes [16, row_bytes] (stored as
// 16-row x 32-byte tiles, each [2][16][16]) and scales [16, S] (stored tile by tile,
// [S/g, 16, g] with g = scale groups per 32-byte tile).
void unshuffle_tile(const uint8_t* codes, const uint8_t* scales, int64_t t, int64_t row_bytes,
                    int64_t S, int64_t esize, int64_t g, uint8_t* codes_out, uint8_t* scales_out) {
  unshuffle_code_tile(codes, t, row_bytes, codes_out);
  const uint8_t* tile_scales = scales + t * kTileRows * S * esize;
  for (int64_t c = 0; c < S / g; ++c)
    for (int64_t r = 0; r < kTileRows; ++r)
      std::memcpy(scales_out + (r * S + c * g) * esize,
                  tile_scales + ((c * kTileRows + r) * g) * esize, g * esize);
}

enum class Impl { definition, avx2, avx512 };

// The 256 e8m0 block scales halved, as the definition takes MXFP4's (the AVX2 kernel's table).
const float* e8m0_half_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int e = 0; e < 256; ++e) {
      const auto byte = static_cast<uint8_t>(e);
      t[e] = weight_scale(Weights::mxfp4, &byte, 0);
    }
    return t;
  }();
  return table.data();
}

// The AVX2 kernel's sign trick needs activation codes other than -128 (its header).
bool codes_hold_min(const Operands& op) {
  for (int64_t m = 0; m < op.M; ++m) {
    const int8_t* x = op.xq + m * op.ldxq;
    for (int64_t k = 0; k < op.K; ++k)
      if (x[k] == INT8_MIN) return true;
  }
  return false;
}

template <Layout L, Impl I>
void matmul_int8(const Tensor& x, const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
                 int64_t group, const Tensor& bias, Tensor& out) {
  constexpr bool Shuffled = L == Layout::shuffled_16x16,
                 Interleaved = L == Layout::interleaved_4x16;
  Operands op{};
  op.kind = w.dtype() == DType::i8 ? Weights::q8_0 : Weights::mxfp4;
  op.M = x.size(0), op.K = x.size(1), op.N = w.size(0), op.S = op.K / kBlock;
  if (op.M == 0 || op.N == 0) return;
  op.xq = static_cast<const int8_t*>(x.raw_data());
  op.ldxq = x.stride(0);
  op.xd = x_scale.data<const float>();
  op.ldxd = x_scale.stride(0);
  op.bias = bias.defined() ? bias.data<const float>() : nullptr;
  op.out = out.data<float>();
  op.ldo = out.stride(0);
  const int64_t row_bytes = op.kind == Weights::q8_0 ? op.K : op.K / 2,
                esize = scale_bytes(op.kind);
  const auto* codes = static_cast<const uint8_t*>(w.raw_data());
  const auto* scales = static_cast<const uint8_t*>(w_scale.raw_data());
  Prepared prepared{};
  // Kept per thread between calls: decode runs ~90 of these per token, and a fresh vector
  // cost an allocation and a zero fill of what prepare_activations overwrites anyway.
  thread_local std::vector<uint8_t> scratch;
  // Prefill-sized batches on AMX (the same bits: see matmul_int8_dot_amx.cpp), with the
  // activations re-laid for it once per call.
  const bool amx = I == Impl::avx512 && op.M >= kAmxMinRows && amx_usable();
  // Shuffled and interleaved tiles go to the AVX-512 kernel as stored; the definition and
  // AMX read a tile put back in plain order into a buffer.
  const bool in_place = (Shuffled || Interleaved) && I == Impl::avx512 && !amx;
  op.interleaved = Interleaved && in_place;
  const int64_t Mpad = (op.M + 15) / 16 * 16;
  std::vector<int8_t> xv;
  std::vector<float> xdt;
  if (amx) {
    xv.resize(static_cast<size_t>(Mpad * op.K));
    xdt.resize(static_cast<size_t>(Mpad * op.S));
    prepare_amx_activations(op, Mpad, xv.data(), xdt.data());
  } else if constexpr (I == Impl::avx2) {
    if (op.kind == Weights::mxfp4) {
      // The codes, then (4-byte aligned: M * K is a multiple of 32) the corrections.
      const auto need = static_cast<size_t>(op.M * op.K + op.M * corrections_stride(op.S) * 4);
      if (scratch.size() < need) scratch.resize(need);
      prepare_activations_avx2(op, reinterpret_cast<int8_t*>(scratch.data()));
      offset_corrections(op, reinterpret_cast<int32_t*>(scratch.data() + op.M * op.K));
    }
  } else if constexpr (I == Impl::avx512) {
    const auto need = static_cast<size_t>(prepared_bytes(op) + 64);
    if (scratch.size() < need) scratch.resize(need);
    void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
    prepare_activations(op, aligned, prepared);
  }
  const bool avx2_exact = I == Impl::avx2 && !codes_hold_min(op);
  const int8_t* avx2_x = reinterpret_cast<const int8_t*>(scratch.data());
  const auto* avx2_xcorr = I == Impl::avx2 && op.kind == Weights::mxfp4
                               ? reinterpret_cast<const int32_t*>(scratch.data() + op.M * op.K)
                               : nullptr;
  const int64_t tiles = (op.N + kTileRows - 1) / kTileRows;
  parallel_for(tiles, [&](int64_t t0, int64_t t1, int) {
    std::vector<uint8_t> codes_buf, scales_buf, amx_scratch;
    std::vector<float> dw_plain;
    if (amx) {
      amx_scratch.resize(static_cast<size_t>(amx_scratch_bytes(op)));
      dw_plain.resize(static_cast<size_t>(kTileRows * op.S));
    }
    if ((Shuffled || Interleaved) && !in_place)
      codes_buf.resize(static_cast<size_t>(kTileRows * row_bytes));
    if (Shuffled && !in_place) scales_buf.resize(static_cast<size_t>(kTileRows * op.S * esize));
    for (int64_t t = t0; t < t1; ++t) {
      if (Shuffled && in_place) {
        cpu::int8dot::shuffled_tile_avx512(op, prepared, codes + t * kTileRows * row_bytes,
                                           scales + t * kTileRows * op.S * esize, t * kTileRows,
                                           codes + op.N * row_bytes);
        continue;
      }
      Tile tile{};
      tile.n0 = t * kTileRows;
      tile.rows = std::min(kTileRows, op.N - tile.n0);
      tile.row_bytes = row_bytes;
      if constexpr (Shuffled) {
        unshuffle_tile(codes, scales, t, row_bytes, op.S, esize, op.kind == Weights::q8_0 ? 1 : 2,
                       codes_buf.data(), scales_buf.data());
        tile.codes = codes_buf.data();
        tile.scales = scales_buf.data();
      } else {
        tile.codes = codes + tile.n0 * row_bytes;
        tile.scales = scales + tile.n0 * op.S * esize;
        if (tile.n0 + 2 * kTileRows <= op.N) tile.next = tile.codes + kTileRows * row_bytes;
        if (Interleaved && !in_place) {
          deinterleave_4x16_rows(tile.codes, codes_buf.data(), tile.rows, row_bytes);
          tile.codes = codes_buf.data();
          tile.next = nullptr;
        }
      }
      if (amx) {
        weight_scales_f32(op.kind, static_cast<const uint8_t*>(tile.scales), tile.rows * op.S,
                          dw_plain.data());
        tile_amx(op, xv.data(), xdt.data(), Mpad, tile, dw_plain.data(), amx_scratch.data());
      } else if constexpr (I == Impl::avx512) {
        tile_avx512(op, prepared, tile);
      } else if (avx2_exact) {
        tile_avx2(op, avx2_x, avx2_xcorr, e8m0_half_table(), tile);
      } else {
        tile_definition(op, tile);
      }
    }
  });
}

// Q8_0-style activation quantization per block of 32: d = amax / 127, codes rounded to
// nearest, ties to even (llama.cpp's SIMD quantize_row_q8_0 rounds so; its scalar
// reference rounds ties away, and stores d in f16 where this keeps f32). A block of
// zeros gets d = 0; a block holding inf or NaN gets d = NaN, so its outputs are NaN.
// This is the definition; quantize_row_avx512 takes the same steps 16 values at a time.
// amax as the largest |x| bit pattern (ordered like the values for non-negative floats;
// NaN and inf above every finite one), no branches per value.
void quantize_row_definition(const float* row, int64_t S, int8_t* q, float* d) {
  for (int64_t b = 0; b < S; ++b) {
    const float* v = row + b * kBlock;
    uint32_t top = 0;
    for (int64_t k = 0; k < kBlock; ++k) {
      uint32_t u;
      std::memcpy(&u, v + k, 4);
      top = std::max(top, u & 0x7FFFFFFFu);
    }
    int8_t* out = q + b * kBlock;
    if (top >= 0x7F800000u) {  // inf or NaN
      d[b] = NAN;
      std::memset(out, 0, kBlock);
      continue;
    }
    float amax;
    std::memcpy(&amax, &top, 4);
    const float scale = amax / 127.0f, inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    d[b] = scale;
    // Adding and subtracting 1.5 * 2^23 rounds |v| < 2^22 to an integer, ties to even.
    constexpr float kRound = 12582912.0f;
    for (int64_t k = 0; k < kBlock; ++k)
      out[k] = static_cast<int8_t>(static_cast<int32_t>((v[k] * inv + kRound) - kRound));
  }
}

template <void (*Row)(const float*, int64_t, int8_t*, float*)>
void quantize_per_block_q8_cpu(const Tensor& x, Tensor& xq, Tensor& x_scale) {
  const int64_t M = x.size(0), S = x.size(1) / kBlock;
  for (int64_t m = 0; m < M; ++m)
    Row(x.data<const float>() + m * x.stride(0), S,
        static_cast<int8_t*>(xq.raw_data()) + m * xq.stride(0),
        x_scale.data<float>() + m * x_scale.stride(0));
}

std::string operands_reason(std::span<const Tensor* const> a, bool shuffled, bool f4) {
  const Tensor& x = *a[0];
  const Tensor& x_scale = *a[1];
  const Tensor& w = *a[2];
  if (std::string why = dense_operands_reason(a); !why.empty()) return why;
  if (x.size(1) % kBlock != 0) return fmt::format("K must be a multiple of 32, got {}", x.size(1));
  if (!x_scale.defined() || x_scale.dim() != 2 || x_scale.size(1) != x.size(1) / kBlock ||
      x_scale.stride(-1) != 1)
    return "x_scale must be [M, K / 32] with stride 1";
  if (a[3]->size(1) != x.size(1) / kBlock) return "w_scale must hold one scale per 32 values";
  if (shuffled && (w.size(0) % kTileRows != 0 || (x.size(1) / (f4 ? 2 : 1)) % 32 != 0))
    return fmt::format("shuffled codes need N % 16 == 0 and 32-byte row tiles, got {}",
                       shape_str(w.shape()));
  return {};
}

}  // namespace

bool avx512_vnni_on_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool cpu =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni") && cpu_has_avx_f16c() && __builtin_cpu_supports("fma");
  return cpu;
#else
  return false;
#endif
}

bool avx512_vnni_usable() { return avx512_vnni_on_cpu() && avx512_allowed(); }

bool avx2_int8_on_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool cpu =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_avx_f16c();
  return cpu;
#else
  return false;
#endif
}

bool avx2_int8_usable() { return avx2_int8_on_cpu() && avx2_allowed(); }

namespace {
std::atomic<bool> g_vbmi_allowed{true};
}  // namespace

bool vbmi_in_use() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool cpu = __builtin_cpu_supports("avx512vbmi");
  return cpu && g_vbmi_allowed.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void set_vbmi_allowed(bool allowed) { g_vbmi_allowed.store(allowed); }

bool amx_usable() {
#if defined(__x86_64__) && defined(__linux__)
  // Linux hands out the AMX tile state only to a process that asks (arch_prctl
  // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), once, for all its threads.
  static const bool granted = [] {
    if (!(__builtin_cpu_supports("amx-int8") && __builtin_cpu_supports("amx-tile"))) return false;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) ==
           0;
  }();
  return granted && avx512_vnni_usable();  // the tail of the AMX kernel is AVX-512, as is the cap
#else
  return false;
#endif
}

int64_t prepared_bytes(const Operands& op) {
  return op.M * corrections_stride(op.S) * 4 +
         (op.kind == Weights::mxfp4 || op.interleaved ? op.M * op.K : 0);
}

int64_t corrections_stride(int64_t S) { return (S + kLanes - 1) / kLanes * kLanes; }

void offset_corrections(const Operands& op, int32_t* corr) {
  const int64_t stride = corrections_stride(op.S);
  const int32_t offset = op.kind == Weights::q8_0 ? 128 : kF4WeightOffset;
  for (int64_t m = 0; m < op.M; ++m) {
    const int8_t* x = op.xq + m * op.ldxq;
    for (int64_t b = 0; b < stride; ++b) {
      int32_t s = 0;
      if (b < op.S)
        for (int64_t k = b * kBlock; k < (b + 1) * kBlock; ++k) s += x[k];
      corr[m * stride + b] = offset * s;
    }
  }
}

void prepare_activations(const Operands& op, void* scratch, Prepared& p) {
  p.S16 = corrections_stride(op.S);
  auto* corr = static_cast<int32_t*>(scratch);
  offset_corrections(op, corr);
  p.xcorr = corr;
  p.xperm = nullptr;
  p.xil = nullptr;
  if (op.interleaved) {
    auto* il = reinterpret_cast<int8_t*>(corr + op.M * p.S16);
    for (int64_t m = 0; m < op.M; ++m)
      interleave_4x16_rows(reinterpret_cast<const uint8_t*>(op.xq + m * op.ldxq),
                           reinterpret_cast<uint8_t*>(il + m * op.K), 1, op.K);
    p.xil = il;
  }
  if (op.kind == Weights::mxfp4) {
    int8_t* perm = reinterpret_cast<int8_t*>(corr + op.M * p.S16);
    // Groups of 4 blocks (128 values): the 64 even-indexed values (16 per block), then the
    // 64 odd ones, the order of a 64-byte load's low and high nibbles.
    for (int64_t m = 0; m < op.M; ++m) {
      const int8_t* x = op.xq + m * op.ldxq;
      int8_t* dst = perm + m * op.K;
      for (int64_t g = 0; g + 4 <= op.S; g += 4)
        for (int64_t i = 0; i < 4; ++i)
          for (int64_t k = 0; k < kBlock / 2; ++k) {
            dst[g * kBlock + i * 16 + k] = x[(g + i) * kBlock + 2 * k];
            dst[g * kBlock + 64 + i * 16 + k] = x[(g + i) * kBlock + 2 * k + 1];
          }
    }
    p.xperm = perm;
  }
}

void register_kernels(KernelRegistry& registry) {
  struct Row {
    const char* name;
    DType code, scale;
    Layout layout;  // of the codes (the scales follow the shuffle, not the interleave)
    const void* definition;
    const void* avx2;
    const void* avx512;
  };
  using Fn = kernels::MatmulQuantizedFn;
  constexpr Layout kPlain = Layout::strided, kShuffled = Layout::shuffled_16x16,
                   kInterleaved = Layout::interleaved_4x16;
  const Row rows[] = {
      {"q8_0_plain", DType::i8, DType::f16, kPlain,
       kernel_fn<Fn>(&matmul_int8<kPlain, Impl::definition>),
       kernel_fn<Fn>(&matmul_int8<kPlain, Impl::avx2>),
       kernel_fn<Fn>(&matmul_int8<kPlain, Impl::avx512>)},
      {"q8_0_shuffled_16x16", DType::i8, DType::f16, kShuffled,
       kernel_fn<Fn>(&matmul_int8<kShuffled, Impl::definition>),
       kernel_fn<Fn>(&matmul_int8<kShuffled, Impl::avx2>),
       kernel_fn<Fn>(&matmul_int8<kShuffled, Impl::avx512>)},
      {"q8_0_interleaved_4x16", DType::i8, DType::f16, kInterleaved,
       kernel_fn<Fn>(&matmul_int8<kInterleaved, Impl::definition>),
       kernel_fn<Fn>(&matmul_int8<kInterleaved, Impl::avx2>),
       kernel_fn<Fn>(&matmul_int8<kInterleaved, Impl::avx512>)},
      {"mxfp4_plain", DType::f4_e2m1, DType::e8m0, kPlain,
       kernel_fn<Fn>(&matmul_int8<kPlain, Impl::definition>),
       kernel_fn<Fn>(&matmul_int8<kPlain, Impl::avx2>),
       kernel_fn<Fn>(&matmul_int8<kPlain, Impl::avx512>)},
      {"mxfp4_shuffled_16x16", DType::f4_e2m1, DType::e8m0, kShuffled,
       kernel_fn<Fn>(&matmul_int8<kShuffled, Impl::definition>),
       kernel_fn<Fn>(&matmul_int8<kShuffled, Impl::avx2>),
       kernel_fn<Fn>(&matmul_int8<kShuffled, Impl::avx512>)},
  };
  enum class Simd { none, avx2, avx512 };
  for (const Row& row : rows)
    for (const Simd impl : {Simd::none, Simd::avx2, Simd::avx512}) {
      const bool simd = impl == Simd::avx512, avx2 = impl == Simd::avx2;
      Kernel k;
      k.op = op_names::matmul_quantized;
      k.name = fmt::format("matmul_quantized.cpu.{}int8_{}",
                           simd   ? "avx512vnni_"
                           : avx2 ? "avx2_"
                                  : "",
                           row.name);
      k.device = DeviceType::cpu;
      k.priority = simd ? 30 : avx2 ? 20 : 10;
      const bool shuffled = row.layout == kShuffled, f4 = row.code == DType::f4_e2m1;
      k.args = {{"x", {DType::i8}, {Layout::strided}, false},
                {"x_scale", {DType::f32}, {Layout::strided}, false},
                {"w", {row.code}, {row.layout}, false},
                {"w_scale", {row.scale}, {shuffled ? kShuffled : kPlain}, false},
                {"bias", {DType::f32}, {Layout::strided}, true},
                {"out", {DType::f32}, {Layout::strided}, false}};
      k.constraint = [shuffled, f4, simd, avx2](std::span<const Tensor* const> a) -> std::string {
        if (simd && !avx512_vnni_usable())
          return "needs AVX-512 VNNI, which this CPU lacks or REFIT_CPU_ISA caps below avx3";
        if (avx2 && !avx2_int8_usable())
          return "needs AVX2, FMA and F16C, which this CPU lacks or REFIT_CPU_ISA caps below avx2";
        return operands_reason(a, shuffled, f4);
      };
      k.constraint_text =
          std::string(simd   ? "AVX-512 VNNI; "
                      : avx2 ? "AVX2 (tiles un-shuffled / de-interleaved first); "
                             : "exact definition (scalar); ") +
          (shuffled ? "w: 16 x 32-byte tiles; " : "") +
          (row.layout == kInterleaved ? "w: runs of 16 blocks interleaved by 4 bytes; " : "") +
          "int8 activations [M, K], x_scale [M, K/32]";
      k.fn = simd ? row.avx512 : avx2 ? row.avx2 : row.definition;
      if (simd) k.cpu_lacks = [] { return avx512_vnni_on_cpu() ? std::string() : "AVX-512 VNNI"; };
      if (avx2) k.cpu_lacks = [] { return avx2_int8_on_cpu() ? std::string() : "AVX2, FMA, F16C"; };
      // The interleave is what this kernel reads fastest (prefill 10-28% faster on
      // `medium`, decode within noise: bench/RESULTS.md); rows shorter than one run of 16
      // blocks are the same bytes interleaved, so they stay plain.
      if (simd && row.layout == kInterleaved)
        k.prefers_weight_layout =
            Kernel::WeightLayoutPreference{&avx512_vnni_usable, kInterleaveRun};
      registry.add(std::move(k));
    }
  for (const bool simd : {false, true}) {
    Kernel q;
    q.op = op_names::quantize_per_block_q8;
    q.name = simd ? "quantize_per_block_q8.cpu.avx512" : "quantize_per_block_q8.cpu";
    q.device = DeviceType::cpu;
    q.priority = simd ? 30 : 10;
    q.args = {{"x", {DType::f32}, {Layout::strided}},
              {"xq", {DType::i8}, {Layout::strided}},
              {"x_scale", {DType::f32}, {Layout::strided}}};
    q.constraint = [simd](std::span<const Tensor* const> a) -> std::string {
      if (simd && !avx512_vnni_usable())
        return "needs AVX-512 VNNI, which this CPU lacks or REFIT_CPU_ISA caps below avx3";
      if (a[0]->stride(-1) != 1 || a[1]->stride(-1) != 1 || a[2]->stride(-1) != 1)
        return "x, xq and x_scale need stride 1 along their last dimension";
      return {};
    };
    q.constraint_text = simd ? "AVX-512 VNNI; rows dense" : "exact definition (scalar); rows dense";
    if (simd) q.cpu_lacks = [] { return avx512_vnni_on_cpu() ? std::string() : "AVX-512 VNNI"; };
    q.fn = simd ? kernel_fn<kernels::QuantizePerTokenFn>(
                      &quantize_per_block_q8_cpu<&quantize_row_avx512>)
                : kernel_fn<kernels::QuantizePerTokenFn>(
                      &quantize_per_block_q8_cpu<&quantize_row_definition>);
    registry.add(std::move(q));
  }
}

}  // namespace refit::cpu::int8dot
