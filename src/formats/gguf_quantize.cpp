#include "formats/gguf_quantize.h"

#include <cmath>

#include "core/error.h"
#include "core/float_formats.h"

namespace refit {

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  if (n % kQK8_0 != 0) fail("Q8_0 quantization: {} values are not whole blocks of {}", n, kQK8_0);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* v = x + b * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    // ggml multiplies by the reciprocal (not divides) and rounds half away from zero.
    for (int j = 0; j < kQK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(std::roundf(v[j] * id));
  }
}

}  // namespace refit
