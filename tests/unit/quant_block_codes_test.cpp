// Q8_0 and MXFP4 blocks a checkpoint holds are stored as they are (weights/block_codes.h):
//  * a parameter stores given codes exactly where quantizing their values puts its own, in
//    every kernel layout and for every kind of sub-shard (replicated, rows or columns of a
//    TP split, rows from several ranges), and says why it cannot when it cannot;
//  * a GGUF block that re-quantizing would change (a Q8_0 block whose largest code is not
//    127 loses precision; an MXFP4 block with a larger exponent than needed changes bytes)
//    loads with the file's bytes and values, and a refit from disk writes the same bytes as
//    a fresh load of that file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"
#include "formats/gguf.h"
#include "formats/gguf_quantize.h"
#include "formats/gguf_types.h"
#include "formats_test_util.h"
#include "kernels/quant/quant_scheme.h"
#include "runtime/engine.h"
#include "weights/block_codes.h"
#include "weights/layout_transform.h"
#include "weights/parameter.h"

namespace refit {
namespace {

using namespace refit::testing;

const std::string kLlamaCpp = std::string(REFIT_SHARED_DIR) + "/oracle/llamacpp";

// Codes and scales of f32 [n, k] quantized plainly, read back as BlockCodes.
struct QuantizedRows {
  std::vector<uint8_t> codes, scales;
  BlockCodes block_codes(const QuantScheme& s, int64_t n, int64_t k) const {
    BlockCodes c;
    c.method = s.method;
    c.shape = {n, k};
    const int64_t code_bytes = s.method == QuantMethod::mxfp4 ? 16 : 32;
    const int64_t scale_bytes = static_cast<int64_t>(dtype_nbytes(s.scale_dtype(), 1));
    c.read = [this, k, code_bytes, scale_bytes](int64_t row, int64_t g0, int64_t groups,
                                                uint8_t* out_codes, uint8_t* out_scales) {
      const int64_t per_row = k / 32;
      if (out_codes)
        std::memcpy(out_codes, codes.data() + (row * per_row + g0) * code_bytes,
                    static_cast<size_t>(groups * code_bytes));
      std::memcpy(out_scales, scales.data() + (row * per_row + g0) * scale_bytes,
                  static_cast<size_t>(groups * scale_bytes));
    };
    return c;
  }
};

std::vector<uint8_t> storage_bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.storage()->data());
  return std::vector<uint8_t>(p, p + t.storage()->nbytes());
}

TEST(QuantBlockCodes, stored_codes_are_where_quantizing_their_values_puts_them) {
  const int64_t n = 64, k = 1088;  // 34 blocks: halves of 17, whole runs of 16 and a tail
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = dist(rng);
  const Tensor values = Tensor::from_floats({n, k}, w);
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  struct Split {
    const char* what;
    std::vector<SubShard> subs;
    Shape local;
    int64_t rank, world;
  };
  const std::vector<Split> splits = {
      {"replicated", {{name, {n, k}, -1, 0, 0, 0, n}}, {n, k}, 0, 1},
      {"rank 1 of 2 by rows", {{name, {n, k}, 0, n / 2, n / 2, 0, n / 2}}, {n / 2, k}, 1, 2},
      {"rank 1 of 2 by columns", {{name, {n, k}, 1, k / 2, k / 2, 0, n}}, {n, k / 2}, 1, 2},
      {"rows from three ranges",
       {{name, {n, k}, 0, 0, 16, 0, 48, {{32, 16}, {16, 16}}}},
       {48, k},
       0,
       2}};
  for (const char* scheme : {"q8_0", "q8_0-w8a8", "mxfp4"}) {
    const QuantScheme s = parse_quant_scheme(scheme);
    QuantizedRows q;
    q.codes.resize(static_cast<size_t>(n * code_row_bytes(s, k)));
    q.scales.resize(static_cast<size_t>(n * s.scale_cols(k)) * dtype_nbytes(s.scale_dtype(), 1));
    quantize_rows(s, w.data(), n, k, q.codes.data(), q.scales.data());
    const BlockCodes codes = q.block_codes(s, n, k);
    std::vector<std::optional<LayoutTransform>> layouts = {std::nullopt,
                                                           LayoutTransform::shuffle_16x16};
    if (s.w8a8) layouts.push_back(LayoutTransform::interleave_4x16);
    for (const Split& split : splits)
      for (const auto& layout : layouts) {
        SCOPED_TRACE(std::string(scheme) + ", " + split.what + ", " +
                     (layout ? layout_transform_name(*layout) : "plain"));
        Parameter by_value("w", split.local, DType::f32, split.subs, split.rank, split.world);
        Parameter by_codes("w", split.local, DType::f32, split.subs, split.rank, split.world);
        by_value.set_quantization(s);
        by_codes.set_quantization(s);
        if (layout) {
          if (!by_value.transform_unsupported_reason(*layout).empty()) continue;
          by_value.apply_transform(*layout);
          by_codes.apply_transform(*layout);
        }
        const SubShard& sub = split.subs[0];
        EXPECT_EQ(by_codes.block_codes_unsupported_reason(sub, codes), "");
        const void* before = by_codes.data().storage()->data();
        by_value.load(sub, values);
        by_codes.load_block_codes(sub, codes);
        EXPECT_EQ(storage_bytes(by_codes.data()), storage_bytes(by_value.data()));
        EXPECT_EQ(storage_bytes(by_codes.scale()), storage_bytes(by_value.scale()));
        EXPECT_EQ(by_codes.data().storage()->data(), before);  // in place (L2)
      }
  }
}

// ggml's MXFP4 block (value j in byte j's low nibble, j + 16 in its high one) in transformers'
// packing (values 2i and 2i + 1 in byte i), for random blocks, against that definition.
TEST(QuantBlockCodes, ggml_mxfp4_blocks_repack_to_transformers_nibble_order) {
  std::mt19937 rng(11);
  for (int t = 0; t < 1000; ++t) {
    BlockMxfp4 b;
    b.e = static_cast<uint8_t>(rng());
    for (uint8_t& q : b.qs) q = static_cast<uint8_t>(rng());
    uint8_t value[32];
    for (int j = 0; j < 16; ++j) {
      value[j] = b.qs[j] & 0x0F;
      value[j + 16] = b.qs[j] >> 4;
    }
    uint8_t codes[16], scale = 0;
    mxfp4_block_to_hf(b, codes, &scale);
    EXPECT_EQ(scale, b.e);
    for (int i = 0; i < 16; ++i) {
      ASSERT_EQ(codes[i] & 0x0F, value[2 * i]) << "block " << t << " byte " << i;
      ASSERT_EQ(codes[i] >> 4, value[2 * i + 1]) << "block " << t << " byte " << i;
    }
  }
}

TEST(QuantBlockCodes, a_parameter_says_why_it_cannot_store_codes_as_they_are) {
  const int64_t n = 16, k = 128;
  const std::string name = "w";
  BlockCodes q8;
  q8.method = QuantMethod::q8_0;
  q8.shape = {n, k};
  q8.read = [](int64_t, int64_t, int64_t, uint8_t*, uint8_t*) {};
  const SubShard whole{name, {n, k}, -1, 0, 0, 0, n};

  Parameter mxfp4("w", Shape{n, k}, DType::f32);
  mxfp4.set_quantization(parse_quant_scheme("mxfp4"));
  EXPECT_NE(mxfp4.block_codes_unsupported_reason(whole, q8).find("q8_0"), std::string::npos);
  Parameter plain("w", Shape{n, k}, DType::f32);
  EXPECT_NE(plain.block_codes_unsupported_reason(whole, q8).find("not quantized"),
            std::string::npos);
  EXPECT_THROW(plain.load_block_codes(whole, q8), Error);

  Parameter q("w", Shape{n, k}, DType::f32);
  q.set_quantization(parse_quant_scheme("q8_0"));
  BlockCodes wrong_shape = q8;
  wrong_shape.shape = {n, 2 * k};
  EXPECT_NE(q.block_codes_unsupported_reason(whole, wrong_shape).find("shape"), std::string::npos);
  EXPECT_NE(q.block_codes_unsupported_reason(whole, BlockCodes{}), "");
  // Columns 48..112 of 128 on some rank: not whole blocks of 32.
  const SubShard odd{name, {n, k}, 1, 48, 64, 0, n};
  Parameter cols("w", Shape{n, 64}, DType::f32, {odd}, 1, 2);
  cols.set_quantization(parse_quant_scheme("q8_0"));
  EXPECT_NE(cols.block_codes_unsupported_reason(odd, q8).find("whole blocks"), std::string::npos);
}

// A ggml block's bytes as the file stores them.
template <class Block>
std::vector<uint8_t> bytes_of(const Block& b) {
  std::vector<uint8_t> bytes(sizeof b);
  std::memcpy(bytes.data(), &b, sizeof b);
  return bytes;
}

// A copy of `path` with the first block of tensor `name` replaced by `block`.
std::string patched_gguf(const TempDir& dir, const std::string& path, const std::string& name,
                         const std::vector<uint8_t>& block) {
  const std::string out = dir.file(std::filesystem::path(path).filename().string());
  std::filesystem::copy_file(path, out, std::filesystem::copy_options::overwrite_existing);
  const auto g = GgufFile::open(path);
  const uint64_t at = g->data_offset() + g->tensor_info(name).offset;
  std::fstream f(out, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(block.size()));
  return out;
}

// The oracle's micro llama in llama-quantize's `type` (q8_0, mxfp4), first seed.
std::string micro_llama_gguf(const std::string& type) {
  return kLlamaCpp + "/llama-" + type + "/micro-llama-" + type + "-s1.gguf";
}

const Parameter& parameter_of(const Engine& e, const std::string& name) {
  for (const auto& p : e.model().parameters().all())
    if (p->name() == name) return *p;
  throw Error("no parameter " + name);
}

TEST(QuantBlockCodes, gguf_blocks_that_requantizing_would_change_load_as_the_file_holds_them) {
  const std::string tensor = "blk.0.attn_output.weight";
  const std::string param = "model.layers.0.self_attn.o_proj.weight";
  for (const char* type : {"q8_0", "mxfp4"}) {
    SCOPED_TRACE(type);
    const std::string original = micro_llama_gguf(type);
    std::vector<uint8_t> block;
    std::vector<float> want(32);
    if (std::string(type) == "q8_0") {
      // d = 0.01 and codes of +-1 to +-5: max |q| 5, so amax / 127 is another scale and the
      // re-quantized codes would round off.
      BlockQ8_0 b{};
      b.d = f32_to_f16(0.01f);
      for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>((j % 5 + 1) * (j % 2 ? -1 : 1));
      block = bytes_of(b);
      for (int j = 0; j < 32; ++j) want[j] = static_cast<float>(b.qs[j]) * f16_to_f32(b.d);
    } else {
      // Every value +-1.0 * 2^-3 (e2m1 code 2, exponent 124): re-quantized, the same values
      // take code 4.0 and exponent 122.
      BlockMxfp4 b{};
      b.e = 124;
      for (int j = 0; j < 16; ++j) b.qs[j] = j % 2 ? 0xA2 : 0x2A;  // +-1.0 nibbles
      block = bytes_of(b);
      for (int j = 0; j < 16; ++j) {
        want[j] = (b.qs[j] & 0x8 ? -1.0f : 1.0f) * 0.125f;
        want[j + 16] = (b.qs[j] & 0x80 ? -1.0f : 1.0f) * 0.125f;
      }
    }
    TempDir dir;
    const std::string patched = patched_gguf(dir, original, tensor, block);
    EngineOptions options;
    options.model_path = patched;
    options.layout = "plain";
    Engine fresh(options);
    const Parameter& p = parameter_of(fresh, param);
    ASSERT_TRUE(p.quantized());
    const Tensor row0 = p.dequantized(0, 1);
    EXPECT_EQ(std::vector<float>(row0.data<const float>(), row0.data<const float>() + 32), want);
    if (std::string(type) == "mxfp4")
      EXPECT_EQ(static_cast<const uint8_t*>(p.scale().storage()->data())[0], 124);
    else
      EXPECT_EQ(std::memcmp(p.scale().storage()->data(), block.data(), 2), 0);

    // A refit from disk writes what a fresh load of the file writes, in place.
    options.model_path = original;
    Engine refit(options);
    const Parameter& q = parameter_of(refit, param);
    const void* codes_at = q.data().storage()->data();
    refit.update_weights_from_disk(patched);
    EXPECT_EQ(storage_bytes(q.data()), storage_bytes(p.data()));
    EXPECT_EQ(storage_bytes(q.scale()), storage_bytes(p.scale()));
    EXPECT_EQ(q.data().storage()->data(), codes_at);
  }
}

// A refit from a GGUF whose blocks hold a NaN or infinite scale is refused naming the tensor,
// and changes nothing (the finiteness check is on by default).
TEST(QuantBlockCodes, a_refit_from_blocks_with_a_non_finite_scale_is_refused) {
  const std::string tensor = "blk.1.ffn_down.weight";
  const std::string param = "model.layers.1.mlp.down_proj.weight";
  for (const char* type : {"q8_0", "mxfp4"}) {
    SCOPED_TRACE(type);
    const std::string original = micro_llama_gguf(type);
    std::vector<uint8_t> block;
    if (std::string(type) == "q8_0") {
      BlockQ8_0 b{};
      b.d = 0x7C00;  // f16 +inf
      block = bytes_of(b);
    } else {
      BlockMxfp4 b{};
      b.e = 0xFF;  // e8m0 NaN
      block = bytes_of(b);
    }
    TempDir dir;
    const std::string bad = patched_gguf(dir, original, tensor, block);
    EngineOptions options;
    options.model_path = original;
    Engine engine(options);
    const Parameter& p = parameter_of(engine, param);
    const std::vector<uint8_t> codes = storage_bytes(p.data()), scales = storage_bytes(p.scale());
    const uint64_t version = engine.weight_version();
    try {
      engine.update_weights_from_disk(bad);
      ADD_FAILURE() << "a non-finite scale was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find(tensor) != std::string::npos ||
                  what.find("model.layers.1.mlp.down_proj.weight") != std::string::npos)
          << what;
      EXPECT_TRUE(what.find("inf") != std::string::npos || what.find("NaN") != std::string::npos)
          << what;
    }
    EXPECT_EQ(engine.weight_version(), version);
    EXPECT_EQ(storage_bytes(p.data()), codes);
    EXPECT_EQ(storage_bytes(p.scale()), scales);
  }
}

}  // namespace
}  // namespace refit
