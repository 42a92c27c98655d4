// GGUF reader: the oracle files as llama.cpp wrote them, every metadata value type through a
// synthetic file, typed accessors and their errors, and zero-copy views.
#include <gtest/gtest.h>

#include <cmath>

#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "formats_test_util.h"

namespace refit {
namespace {
using namespace refit::testing;

const std::string kStoriesGguf = kOracle + "/stories260K/stories260K.gguf";

TEST(FormatsGguf, stories260k_header_metadata_and_tensor_table_match_formats_md) {
  auto f = GgufFile::open(kStoriesGguf);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 19u);
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset(), 14176u);  // header ends at 14152, padded to 32
  EXPECT_EQ(f->architecture(), "llama");
  const auto& md = f->metadata();
  EXPECT_EQ(md.require_u32("llama.context_length"), 2048u);
  EXPECT_EQ(md.require_u32("llama.block_count"), 5u);
  EXPECT_FLOAT_EQ(md.require_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_FALSE(md.get_f32("llama.rope.freq_base").has_value());
  EXPECT_EQ(md.require_string("tokenizer.ggml.model"), "llama");
  auto tokens = md.require_array_strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  auto scores = md.require_array_f32("tokenizer.ggml.scores");
  EXPECT_EQ(scores[260], -1.0f);
  auto types = md.require_array_i32("tokenizer.ggml.token_type");
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(types[3], 6);
  EXPECT_EQ(md.require_u32("tokenizer.ggml.padding_token_id"), 0xFFFFFFFFu);
  // i32 cannot hold 0xFFFFFFFF: the accessor says so instead of wrapping.
  expect_format_error([&] { md.get_i32("tokenizer.ggml.padding_token_id"); },
                      {kStoriesGguf, "tokenizer.ggml.padding_token_id", "does not fit in i32"});

  const GgufTensorInfo& emb = f->tensor_info("token_embd.weight");
  EXPECT_EQ(emb.ne, (std::vector<uint64_t>{64, 512}));
  EXPECT_EQ(emb.shape, (Shape{512, 64}));  // ne reversed: row-major
  EXPECT_EQ(emb.type, GgmlType::f32);
  EXPECT_EQ(f->tensor_info("blk.0.ffn_down.weight").shape, (Shape{64, 172}));
}

TEST(FormatsGguf, typed_accessors_name_the_key_and_the_actual_type) {
  auto f = GgufFile::open(kStoriesGguf);
  const auto& md = f->metadata();
  expect_format_error([&] { md.get_u32("llama.attention.layer_norm_rms_epsilon"); },
                      {kStoriesGguf, "llama.attention.layer_norm_rms_epsilon", "f32"});
  expect_format_error([&] { md.get_string("llama.block_count"); },
                      {"llama.block_count", "string", "u32"});
  expect_format_error([&] { md.get_array_f32("tokenizer.ggml.tokens"); },
                      {"tokenizer.ggml.tokens", "array[string]"});
  expect_format_error([&] { md.require_u32("llama.no_such_key"); },
                      {kStoriesGguf, "llama.no_such_key", "missing"});
  EXPECT_FALSE(md.get_u32("llama.no_such_key").has_value());
}

TEST(FormatsGguf, tensors_are_zero_copy_views_bit_identical_to_llama2c) {
  auto g = GgufFile::open(kStoriesGguf);
  auto bin = Llama2cModel::open(kOracle + "/stories260K/stories260K.bin");
  Tensor emb = g->tensor("token_embd.weight");
  EXPECT_TRUE(emb.read_only());
  EXPECT_EQ(emb.shape(), (Shape{512, 64}));
  // The view points into the mapping: no copy was made.
  EXPECT_EQ(emb.storage()->nbytes(), 512u * 64 * 4);
  const Tensor& ref = bin->tensor("token_embedding_table");
  EXPECT_EQ(std::memcmp(emb.raw_data(), ref.raw_data(), 512 * 64 * 4), 0);
  // Per-layer GGUF tensors are slices of llama2.c's stacked ones (FORMATS.md: bit-identical).
  for (int l = 0; l < 5; ++l) {
    Tensor q = g->tensor(fmt::format("blk.{}.attn_q.weight", l));
    Tensor w2 = g->tensor(fmt::format("blk.{}.ffn_down.weight", l));
    EXPECT_EQ(std::memcmp(q.raw_data(), bin->tensor("wq").select(0, l).raw_data(), 64 * 64 * 4), 0);
    EXPECT_EQ(std::memcmp(w2.raw_data(), bin->tensor("w2").select(0, l).raw_data(), 64 * 172 * 4),
              0);
  }
  Tensor deq = g->dequantize("output_norm.weight");
  EXPECT_EQ(deq.to_floats(), g->tensor("output_norm.weight").to_floats());
}

TEST(FormatsGguf, every_value_type_and_nested_arrays_round_trip_in_v2_and_v3) {
  for (uint32_t version : {2u, 3u}) {
    GgufBuilder b;
    b.version = version;
    b.kv<uint8_t>("t.u8", 0, 200);
    b.kv<int8_t>("t.i8", 1, -100);
    b.kv<uint16_t>("t.u16", 2, 60000);
    b.kv<int16_t>("t.i16", 3, -30000);
    b.kv_u32("t.u32", 4000000000u);
    b.kv<int32_t>("t.i32", 5, -2000000000);
    b.kv_f32("t.f32", 0.25f);
    b.kv<uint8_t>("t.bool", 7, 1);
    b.kv_str("t.string", "héllo ☕");
    b.kv<uint64_t>("t.u64", 10, 1ull << 40);
    b.kv<int64_t>("t.i64", 11, -(1ll << 40));
    b.kv<double>("t.f64", 12, 1.5);
    b.kv_strings("t.strings", {"a", "", "ü"});
    std::string nested;  // array of 2 arrays of i32: [[1, 2], [3]]
    put<uint32_t>(nested, 9);
    put<uint64_t>(nested, 2);
    put<uint32_t>(nested, 5);
    put<uint64_t>(nested, 2);
    put<int32_t>(nested, 1);
    put<int32_t>(nested, 2);
    put<uint32_t>(nested, 5);
    put<uint64_t>(nested, 1);
    put<int32_t>(nested, 3);
    b.raw_kv("t.nested", 9, nested);
    b.set_alignment(64);
    b.tensor("w", {32, 2}, 0, f32_bytes(std::vector<float>(64, 1.0f)));
    b.tensor("v", {3}, 0, f32_bytes({1, 2, 3}));
    TempDir dir;
    auto f = GgufFile::open(dir.write("all.gguf", b.build()));
    const auto& md = f->metadata();
    EXPECT_EQ(f->version(), version);
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->data_offset() % 64, 0u);
    EXPECT_EQ(md.require_u32("t.u8"), 200u);
    EXPECT_EQ(md.require_i32("t.i8"), -100);
    EXPECT_EQ(md.require_u32("t.u16"), 60000u);
    EXPECT_EQ(md.require_i32("t.i16"), -30000);
    EXPECT_EQ(md.require_u32("t.u32"), 4000000000u);
    EXPECT_EQ(md.require_i32("t.i32"), -2000000000);
    EXPECT_EQ(md.require_f32("t.f32"), 0.25f);
    EXPECT_TRUE(md.require_bool("t.bool"));
    EXPECT_EQ(md.require_string("t.string"), "héllo ☕");
    EXPECT_EQ(md.require_u64("t.u64"), 1ull << 40);
    EXPECT_EQ(md.find("t.i64")->as_i64(), -(1ll << 40));
    EXPECT_EQ(md.require_f32("t.f64"), 1.5f);
    EXPECT_EQ(md.require_array_strings("t.strings"), (std::vector<std::string>{"a", "", "ü"}));
    const GgufValue* n = md.find("t.nested");
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->type_str(), "array[array]");
    ASSERT_EQ(n->array_size(), 2u);
    EXPECT_EQ(n->at(0).array_size(), 2u);
    EXPECT_EQ(n->at(0).at(1).as_i64(), 2);
    EXPECT_EQ(n->at(1).at(0).as_i64(), 3);
    expect_format_error([&] { md.get_i32("t.u32"); }, {"t.u32", "does not fit in i32"});
    expect_format_error([&] { md.get_u32("t.i8"); }, {"t.i8", "does not fit in u32"});
    EXPECT_EQ(f->tensor("w").shape(), (Shape{2, 32}));
    EXPECT_EQ(f->tensor("v").to_floats(), (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(f->tensor_info("v").offset % 64, 0u);
  }
}

TEST(FormatsGguf, quantized_tensors_are_raw_block_views_with_their_logical_shape) {
  auto f = GgufFile::open(kOracle + "/llamacpp/llama-q8_0/micro-llama-q8_0-s1.gguf");
  GgmlTensorView v = f->raw("blk.0.attn_q.weight");
  EXPECT_EQ(v.type, GgmlType::q8_0);
  EXPECT_EQ(v.shape, (Shape{128, 128}));
  EXPECT_EQ(v.bytes.dtype(), DType::u8);
  EXPECT_EQ(v.bytes.numel(), 128 * 128 / 32 * 34);
  EXPECT_EQ(v.row_bytes(), 128 / 32 * 34);
  expect_format_error([&] { f->tensor("blk.0.attn_q.weight"); },
                      {"blk.0.attn_q.weight", "quantized", "q8_0"});
}

// The q8_0 and mxfp4 oracle files were quantized by llama.cpp from the same weights as the
// f32 one: each dequantized value must lie within the quantization step of the original.
TEST(FormatsGguf, dequantized_oracle_weights_lie_within_one_quantization_step_of_f32) {
  auto f32 = GgufFile::open(kOracle + "/llamacpp/llama-f32/micro-llama-f32-s1.gguf");
  auto q8 = GgufFile::open(kOracle + "/llamacpp/llama-q8_0/micro-llama-q8_0-s1.gguf");
  auto mx = GgufFile::open(kOracle + "/llamacpp/llama-mxfp4/micro-llama-mxfp4-s1.gguf");
  for (const char* name : {"blk.0.attn_q.weight", "blk.1.ffn_down.weight"}) {
    std::vector<float> ref = f32->tensor(name).to_floats();
    std::vector<float> a = q8->dequantize(name).to_floats();
    std::vector<float> b = mx->dequantize(name).to_floats();
    ASSERT_EQ(a.size(), ref.size());
    ASSERT_EQ(b.size(), ref.size());
    for (size_t blk = 0; blk < ref.size() / 32; ++blk) {
      float amax = 0;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(ref[blk * 32 + j]));
      for (size_t j = 0; j < 32; ++j) {
        size_t i = blk * 32 + j;
        // Q8_0: d = amax / 127, rounded to f16 (relative error 2^-11, times up to 127 steps),
        // so the error is at most d / 2 + 127 * d * 2^-11 < 0.57 d.
        EXPECT_LE(std::fabs(a[i] - ref[i]), amax / 127 * 0.57f + 1e-6f) << name << " " << i;
        // MXFP4: e2m1 steps are at most 2 units of a scale that is at most amax / 4.
        EXPECT_LE(std::fabs(b[i] - ref[i]), amax / 3 + 1e-6f) << name << " " << i;
      }
    }
  }
}

TEST(FormatsGguf, vocab_only_files_have_metadata_and_no_tensors) {
  for (const char* name : {"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "falcon", "starcoder"}) {
    auto f = GgufFile::open(kOracle + "/vocab/ggml-vocab-" + name + ".gguf");
    EXPECT_TRUE(f->tensors().empty()) << name;
    EXPECT_GT(f->metadata().require_array_strings("tokenizer.ggml.tokens").size(), 30000u) << name;
  }
}

}  // namespace
}  // namespace refit
