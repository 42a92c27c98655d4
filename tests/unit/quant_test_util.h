// A quantized weight as a Parameter stores it, for the quantized kernel tests: random rows
// quantized by the scheme's quantize_rows (codes and scales), optionally shuffled into the
// (16, 16) tile layout, with the f32 values the codes stand for.
#pragma once

#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/quant/quant_scheme.h"
#include "weights/layout_transform.h"

namespace refit::testing {

// One case of the parameterized quantized-kernel tests: a scheme, a layout, a shape.
struct KernelCase {
  std::string scheme;
  bool shuffled;
  int64_t n, k;
};
// How gtest shows a case (instead of its bytes).
inline void PrintTo(const KernelCase& c, std::ostream* os) {
  *os << c.scheme << (c.shuffled ? " shuffled" : " plain") << ", N " << c.n << ", K " << c.k;
}

struct QuantWeight {
  Tensor codes, scales;            // as a Parameter stores them
  std::vector<float> dequantized;  // [N, K], plain order
};

// Normal values, row magnitudes varying with (i % uneven) so that scales differ.
inline QuantWeight make_quant_weight(const QuantScheme& s, int64_t n, int64_t k, bool shuffled,
                                     uint32_t seed, int uneven = 5) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = dist(rng) * (1.0f + static_cast<float>(i % uneven));
  QuantWeight q;
  const int64_t row_bytes = code_row_bytes(s, k), sc = s.scale_cols(k);
  Tensor bytes = Tensor::empty({n, row_bytes}, DType::u8);
  q.scales = Tensor::empty({n, sc}, s.scale_dtype());
  quantize_rows(s, w.data(), n, k, bytes.raw_data(), q.scales.raw_data());
  q.dequantized.resize(w.size());
  dequantize_rows(s, bytes.raw_data(), q.scales.raw_data(), n, k, q.dequantized.data());
  if (shuffled) {
    bytes = shuffle_16x16(bytes);
    if (scales_follow_tiles(s)) {
      shuffle_scales_16(q.scales.raw_data(), n, sc, scale_groups_per_tile(s),
                        dtype_nbytes(s.scale_dtype(), 1));
      q.scales.set_layout(Layout::shuffled_16x16);
    }
  }
  q.codes = Tensor::from_storage(bytes.storage(), s.code_dtype(), {n, k});
  q.codes.set_layout(shuffled ? Layout::shuffled_16x16 : Layout::strided);
  return q;
}

}  // namespace refit::testing
