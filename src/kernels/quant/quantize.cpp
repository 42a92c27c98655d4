#include "kernels/quant/quantize.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/storage.h"
#include "core/thread_pool.h"
#include "kernels/interleave_4x16.h"
#include "kernels/quant/quant_reference.h"
#include "kernels/quant/quant_rows_simd.h"

namespace refit {
namespace {

// Rows of the source as f32: a pointer into the tensor when it is f32 with unit column
// stride, else the row widened into the caller's scratch (k floats).
class RowReader {
 public:
  explicit RowReader(const Tensor& rows) : rows_(rows), k_(rows.size(1)) {
    const DType dt = rows.dtype();
    unit_stride_ =
        rows.stride(1) == 1 && (dt == DType::f32 || dt == DType::f16 || dt == DType::bf16);
  }

  const float* row(int64_t r, float* scratch) const {
    if (unit_stride_) {
      const int64_t at = r * rows_.stride(0);
      switch (rows_.dtype()) {
        case DType::f32:
          return rows_.data<const float>() + at;
        case DType::f16:
          convert_f16_to_f32(rows_.data<const uint16_t>() + at, scratch, k_);
          return scratch;
        case DType::bf16:
          convert_bf16_to_f32(rows_.data<const uint16_t>() + at, scratch, k_);
          return scratch;
        default:
          break;
      }
    }
    // Anything else (f64, strided columns): Tensor::copy_from's general conversion.
    Tensor dst = Tensor::from_storage(
        Storage::wrap(scratch, static_cast<size_t>(k_) * sizeof(float), Device::cpu(), [] {}),
        DType::f32, {1, k_});
    dst.copy_from(rows_.narrow(0, r, 1));
    return scratch;
  }

 private:
  const Tensor& rows_;
  int64_t k_;
  bool unit_stride_ = false;
};

// fp8 per-tensor and per-block scales need every row of their block before any code:
// a first parallel pass takes each row's group amaxes, then the blocks' maxima (exact in
// any order) become the scales, written per row as the parameter stores them.
void fp8_block_scales(const QuantScheme& scheme, const RowReader& reader, int64_t n, int64_t k,
                      float* scales, int64_t grain) {
  const int64_t g = scheme.group(k), s = scheme.scale_cols(k);
  std::vector<float> amax(static_cast<size_t>(n * s));
  parallel_for(
      n,
      [&](int64_t r0, int64_t r1, int) {
        std::vector<float> scratch(static_cast<size_t>(k));
        for (int64_t r = r0; r < r1; ++r)
          quant_simd::group_amax(reader.row(r, scratch.data()), k, g, &amax[r * s]);
      },
      grain);
  const int64_t block = scheme.method == QuantMethod::fp8_tensor ? n : scheme.block_rows();
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    for (int64_t c = 0; c < s; ++c) {
      float m = 0.0f;
      for (int64_t r = b0; r < b1; ++r) m = std::max(m, amax[r * s + c]);
      const float scale = fp8_group_scale(m);
      for (int64_t r = b0; r < b1; ++r) scales[r * s + c] = scale;
    }
  }
}

// shuffle_16x16 for one 16-row tile of code bytes: [16, row_bytes] viewed [16, C, 2, 16]
// (C 32-byte column tiles of two 16-byte halves), permuted to [C, 2, 16, 16].
void scatter_code_tile(const uint8_t* tile, int64_t row_bytes, uint8_t* out) {
  for (int64_t c = 0; c < row_bytes / 32; ++c)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t r = 0; r < 16; ++r)
        std::memcpy(out + ((c * 2 + h) * 16 + r) * 16, tile + r * row_bytes + c * 32 + h * 16, 16);
}

// shuffle_scales_16 for one tile: [16, S] viewed [16, S / g, g], permuted to [S / g, 16, g].
void scatter_scale_tile(const uint8_t* tile, int64_t s, int64_t g, size_t elem, uint8_t* out) {
  for (int64_t c = 0; c < s / g; ++c)
    for (int64_t r = 0; r < 16; ++r)
      std::memcpy(out + static_cast<size_t>((c * 16 + r) * g) * elem,
                  tile + static_cast<size_t>(r * s + c * g) * elem, static_cast<size_t>(g) * elem);
}

// Rows [0, n) of codes and scales, each made by a per-thread row function (`make_row()`
// returns one: row(r, row_codes, row_scales) writes row r's plain codes and scales), placed
// in `layout`: plain rows, 4x16-interleaved code rows, or 16-row tiles shuffled (codes, and
// the scales where they follow the tiles), staged per tile.
template <class MakeRow>
void write_code_rows(const QuantScheme& scheme, int64_t n, int64_t k, const MakeRow& make_row,
                     uint8_t* codes, uint8_t* scales, Layout layout, int64_t grain_rows) {
  const int64_t row_bytes = code_row_bytes(scheme, k), s = scheme.scale_cols(k);
  const size_t scale_size = dtype_nbytes(scheme.scale_dtype(), 1);
  const bool shuffled = layout == Layout::shuffled_16x16,
             interleaved = layout == Layout::interleaved_4x16;
  const bool tiled_scales = shuffled && scales_follow_tiles(scheme);
  REFIT_ASSERT(!interleaved || scheme.method == QuantMethod::q8_0);
  REFIT_ASSERT(!shuffled || (n % 16 == 0 && row_bytes % 32 == 0));
  if (!shuffled) {
    parallel_for(
        n,
        [&](int64_t r0, int64_t r1, int) {
          auto row = make_row();
          std::vector<uint8_t> plain(interleaved ? static_cast<size_t>(row_bytes) : 0);
          for (int64_t r = r0; r < r1; ++r) {
            uint8_t* row_codes = codes + r * row_bytes;
            row(r, interleaved ? plain.data() : row_codes,
                scales + static_cast<size_t>(r * s) * scale_size);
            if (interleaved) interleave_4x16_rows(plain.data(), row_codes, 1, row_bytes);
          }
        },
        grain_rows);
    return;
  }
  // Shuffled: a 16-row tile is made into staging, then scattered to its tile slot (tiles
  // are contiguous and in row order in both layouts).
  parallel_for(
      n / 16,
      [&](int64_t t0, int64_t t1, int) {
        auto row = make_row();
        std::vector<uint8_t> tile_codes(static_cast<size_t>(16 * row_bytes));
        std::vector<uint8_t> tile_scales(tiled_scales ? static_cast<size_t>(16 * s) * scale_size
                                                      : 0);
        for (int64_t tile = t0; tile < t1; ++tile) {
          for (int64_t i = 0; i < 16; ++i) {
            const int64_t r = tile * 16 + i;
            uint8_t* row_scales = tiled_scales
                                      ? tile_scales.data() + static_cast<size_t>(i * s) * scale_size
                                      : scales + static_cast<size_t>(r * s) * scale_size;
            row(r, tile_codes.data() + i * row_bytes, row_scales);
          }
          scatter_code_tile(tile_codes.data(), row_bytes, codes + tile * 16 * row_bytes);
          if (tiled_scales)
            scatter_scale_tile(tile_scales.data(), s, scale_groups_per_tile(scheme), scale_size,
                               scales + static_cast<size_t>(tile * 16 * s) * scale_size);
        }
      },
      std::max<int64_t>(1, grain_rows / 16));
}

}  // namespace

void quantize_tensor(const QuantScheme& scheme, const Tensor& rows, void* codes_v, void* scales_v,
                     Layout layout) {
  if (!scheme.enabled()) fail("quantize: no quantization scheme");
  if (rows.dim() != 2) fail("quantize: expected [rows, K] weights, got {}", rows.str());
  if (rows.device().type != DeviceType::cpu) fail("quantize: {} is not on the cpu", rows.str());
  const int64_t n = rows.size(0), k = rows.size(1);
  std::string why = scheme.unsupported_reason(k);
  if (!why.empty()) fail("quantize: {}", why);
  if (n == 0 || k == 0) return;
  const int64_t s = scheme.scale_cols(k), g = scheme.group(k);
  const RowReader reader(rows);
  // Enough rows per task that a small tensor is not split across threads for nothing.
  const int64_t grain_rows = std::max<int64_t>(1, 16384 / k);

  const QuantMethod method = scheme.method;
  if (method == QuantMethod::fp8_tensor || method == QuantMethod::fp8_block)
    fp8_block_scales(scheme, reader, n, k, static_cast<float*>(scales_v), grain_rows);

  // One thread's row quantizer, with its scratch.
  auto make_row = [&] {
    return
        [&, row = std::vector<float>(static_cast<size_t>(k)),
         q8_scales = std::vector<float>(method == QuantMethod::q8_0 ? static_cast<size_t>(s) : 0),
         f4_codes =
             std::vector<uint8_t>(method == QuantMethod::mxfp4 ? static_cast<size_t>(k) : 0)](
            int64_t r, uint8_t* row_codes, uint8_t* row_scales) mutable {
          const float* x = reader.row(r, row.data());
          switch (method) {
            case QuantMethod::fp8_channel: {
              float amax = 0.0f;
              quant_simd::group_amax(x, k, k, &amax);
              const float scale = fp8_group_scale(amax);
              std::memcpy(row_scales, &scale, sizeof scale);
              quant_simd::fp8_row(x, k, k, &scale, row_codes);
              break;
            }
            case QuantMethod::fp8_tensor:
            case QuantMethod::fp8_block:
              quant_simd::fp8_row(x, k, g, reinterpret_cast<const float*>(row_scales), row_codes);
              break;
            case QuantMethod::mxfp4:
              quant_simd::mxfp4_row(x, k, row_codes, row_scales, f4_codes.data());
              break;
            case QuantMethod::q8_0:
              quant_simd::q8_0_row(x, k, reinterpret_cast<int8_t*>(row_codes), q8_scales.data());
              // F16C where the CPU has it; bit-identical to f32_to_f16 (core/float_convert.h).
              convert_f32_to_f16(q8_scales.data(), reinterpret_cast<uint16_t*>(row_scales), s);
              break;
            case QuantMethod::none:
              break;
          }
        };
  };
  write_code_rows(scheme, n, k, make_row, static_cast<uint8_t*>(codes_v),
                  static_cast<uint8_t*>(scales_v), layout, grain_rows);
}

void store_code_rows(const QuantScheme& scheme, int64_t n, int64_t k, const CodeRowFn& row,
                     void* codes, void* scales, Layout layout) {
  if (n == 0 || k == 0) return;
  write_code_rows(
      scheme, n, k, [&] { return row; }, static_cast<uint8_t*>(codes),
      static_cast<uint8_t*>(scales), layout, std::max<int64_t>(1, 16384 / k));
}

void quantize_rows(const QuantScheme& scheme, const float* rows, int64_t n, int64_t k, void* codes,
                   void* scales) {
  // A view over the caller's rows (never freed by it): the fast path reads them in place.
  auto storage = Storage::wrap(
      const_cast<float*>(rows), static_cast<size_t>(n * k) * sizeof(float), Device::cpu(), [] {},
      /*writable=*/false);
  quantize_tensor(scheme, Tensor::from_storage(storage, DType::f32, {n, k}), codes, scales,
                  Layout::strided);
}

}  // namespace refit
