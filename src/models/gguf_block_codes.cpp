#include "models/gguf_block_codes.h"

#include <cstring>
#include <memory>
#include <vector>

#include "formats/gguf_quantize.h"
#include "formats/gguf_types.h"
#include "models/tensor_table.h"

namespace refit {

BlockCodes gguf_block_codes(const GgufFile& g, const std::string& name, int64_t expert,
                            int64_t rope_permute_heads) {
  const GgufTensorInfo& info = g.tensor_info(name);
  if (info.type != GgmlType::q8_0 && info.type != GgmlType::mxfp4) return {};
  // Another shape is not read as codes: the loader's checks then name what is wrong with it.
  const size_t dims = expert >= 0 ? 3 : 2;
  if (info.shape.size() != dims || (expert >= 0 && expert >= info.shape[0])) return {};
  const int64_t rows = info.shape[dims - 2], k = info.shape[dims - 1];
  if (k % 32 != 0 || (rope_permute_heads > 0 && rows % (2 * rope_permute_heads) != 0)) return {};
  const GgmlTensorView raw = g.raw(name);
  const bool q8 = info.type == GgmlType::q8_0;
  const size_t block = q8 ? sizeof(BlockQ8_0) : sizeof(BlockMxfp4);
  const size_t row_bytes = static_cast<size_t>(k / 32) * block;
  const uint8_t* base = raw.bytes.data<const uint8_t>() +
                        (expert >= 0 ? static_cast<size_t>(expert * rows) * row_bytes : 0);
  // Parameter row i is file row order[i] under the rope permutation (applied to row indices);
  // null: the file's own order.
  std::shared_ptr<std::vector<int64_t>> order;
  if (rope_permute_heads > 0) {
    Tensor index = Tensor::empty({rows, 1}, DType::f32);
    for (int64_t i = 0; i < rows; ++i) index.data<float>()[i] = static_cast<float>(i);
    const std::vector<float> moved =
        permute_rows_for_gguf_rope(index, rope_permute_heads, true).to_floats();
    order = std::make_shared<std::vector<int64_t>>(moved.begin(), moved.end());
  }
  BlockCodes codes;
  codes.method = q8 ? QuantMethod::q8_0 : QuantMethod::mxfp4;
  codes.shape = {rows, k};
  // `bytes` keeps the file's mapping referenced as long as the reader lives.
  codes.read = [bytes = raw.bytes, base, row_bytes, block, q8, order](
                   int64_t row, int64_t g0, int64_t groups, uint8_t* out_codes,
                   uint8_t* out_scales) {
    const int64_t file_row = order ? (*order)[static_cast<size_t>(row)] : row;
    const uint8_t* src =
        base + static_cast<size_t>(file_row) * row_bytes + static_cast<size_t>(g0) * block;
    for (int64_t j = 0; j < groups; ++j, src += block) {
      if (q8) {  // {f16 d; i8 qs[32]}: the scale and the codes, as they are
        std::memcpy(out_scales + 2 * j, src, 2);
        if (out_codes) std::memcpy(out_codes + 32 * j, src + 2, 32);
      } else if (!out_codes) {  // {e8m0 e; qs[16]}
        out_scales[j] = src[0];
      } else {  // ggml packs value j with j + 16, transformers 2i with 2i + 1
        BlockMxfp4 b;
        std::memcpy(&b, src, sizeof b);
        mxfp4_block_to_hf(b, out_codes + 16 * j, out_scales + j);
      }
    }
  };
  return codes;
}

}  // namespace refit
