// The safetensors and GGUF writers, read back with the formats readers: every name, dtype,
// shape and byte; every metadata value type; alignment; and refusals of misuse.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/float_formats.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "formats_test_util.h"

namespace refit {
namespace {

using testing::TempDir;

Tensor ramp(Shape shape, DType dtype, float scale) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 97 - 48);
  return Tensor::from_floats(shape, v).to(dtype);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), a.nbytes()) == 0;
}

std::vector<std::pair<std::string, Tensor>> sample_tensors() {
  return {{"a.weight", ramp({3, 5}, DType::f32, 0.5f)},
          {"b.bias", ramp({7}, DType::f16, 0.25f)},  // 14 bytes: the next tensor is unaligned
          {"c.weight", ramp({2, 3, 4}, DType::bf16, 1.0f)},
          {"d.ids", ramp({4}, DType::i32, 1.0f)},
          {"e.scalar", ramp({}, DType::f32, 1.0f)}};
}

TEST(SynthSafetensorsWriter, round_trip_through_the_reader) {
  TempDir dir;
  auto tensors = sample_tensors();
  const std::string path = dir.file("x.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "hi"}});
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "hi");
  EXPECT_EQ(f->data_offset() % 8, 0u);  // header padded to 8 bytes
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    EXPECT_EQ(f->tensors()[i].name, name);  // data-offset order is the written order
    EXPECT_TRUE(same_bytes(f->tensor(name), t)) << name;
  }
  EXPECT_EQ(std::filesystem::file_size(path), f->data_offset() + 60 + 14 + 48 + 16 + 4);
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

TEST(SynthSafetensorsWriter, refuses_wrong_order_size_and_duplicates) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  std::vector<SafetensorsEntry> entries = {{"x", DType::f32, {2}}, {"y", DType::f16, {3}}};
  {
    SafetensorsWriter w(path, entries);
    float two[2] = {1, 2};
    EXPECT_THROW(w.write("y", two, 6), Error);  // out of order
    EXPECT_THROW(w.write("x", two, 4), Error);  // wrong size
    w.write("x", two, 8);
    EXPECT_THROW(w.write("y", ramp({3}, DType::f32, 1.0f)), Error);  // wrong dtype
    EXPECT_THROW(w.finish(), Error);                                 // y missing
  }
  // An unfinished writer leaves nothing behind under either name.
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  EXPECT_THROW(SafetensorsWriter(path, {{"x", DType::f32, {1}}, {"x", DType::f32, {1}}}), Error);
  EXPECT_THROW(SafetensorsWriter(path, {{"__metadata__", DType::f32, {1}}}), Error);
  EXPECT_THROW(SafetensorsWriter(path, {{"p", DType::f4_e2m1, {2}}}), Error);
}

TEST(SynthGgufWriter, every_metadata_value_type_round_trips) {
  GgufWriter w;
  w.add_u8("t.u8", 200);
  w.add_i8("t.i8", -100);
  w.add_u16("t.u16", 60000);
  w.add_i16("t.i16", -30000);
  w.add_u32("t.u32", 4000000000u);
  w.add_i32("t.i32", -2000000000);
  w.add_u64("t.u64", 1ull << 40);
  w.add_i64("t.i64", -(1ll << 40));
  w.add_f32("t.f32", 1.5e-5f);
  w.add_f64("t.f64", 3.141592653589793);
  w.add_bool("t.bool", true);
  w.add_string("t.string", "h\xC3\xA9llo \xE2\x96\x81");
  std::vector<std::string> strs = {"<s>", "", "\xE2\x96\x81the"};
  std::vector<float> f32s = {0.5f, -1.0f, 3.0f};
  std::vector<int32_t> i32s = {1, -2, 6};
  std::vector<uint32_t> u32s = {7, 8};
  std::vector<int64_t> i64s = {-9};
  std::vector<uint8_t> u8s = {1, 2, 255};
  w.add_array_strings("a.strings", strs);
  w.add_array_f32("a.f32", f32s);
  w.add_array_i32("a.i32", i32s);
  w.add_array_u32("a.u32", u32s);
  w.add_array_i64("a.i64", i64s);
  w.add_array_u8("a.u8", u8s);
  EXPECT_THROW(w.add_u32("t.u32", 1), Error);  // duplicate key

  std::vector<uint8_t> bytes = w.header_bytes();  // no tensors: a complete file
  auto f = GgufFile::parse(ByteSource::from_bytes("mem.gguf", bytes.data(), bytes.size()));
  EXPECT_EQ(f->version(), 3u);
  const GgufMetadata& m = f->metadata();
  ASSERT_EQ(m.size(), 18u);
  EXPECT_EQ(m.entries()[0].first, "t.u8");  // insertion order kept
  EXPECT_EQ(m.find("t.u8")->type(), GgufValueType::u8);
  EXPECT_EQ(m.find("t.u8")->as_u64(), 200u);
  EXPECT_EQ(m.find("t.i8")->as_i64(), -100);
  EXPECT_EQ(m.find("t.u16")->as_u64(), 60000u);
  EXPECT_EQ(m.find("t.i16")->as_i64(), -30000);
  EXPECT_EQ(m.require_u32("t.u32"), 4000000000u);
  EXPECT_EQ(m.require_i32("t.i32"), -2000000000);
  EXPECT_EQ(m.require_u64("t.u64"), 1ull << 40);
  EXPECT_EQ(m.find("t.i64")->as_i64(), -(1ll << 40));
  EXPECT_EQ(m.find("t.f32")->type(), GgufValueType::f32);
  EXPECT_EQ(m.require_f32("t.f32"), 1.5e-5f);
  EXPECT_EQ(m.find("t.f64")->type(), GgufValueType::f64);
  EXPECT_EQ(m.find("t.f64")->as_f64(), 3.141592653589793);
  EXPECT_TRUE(m.require_bool("t.bool"));
  EXPECT_EQ(m.require_string("t.string"), "h\xC3\xA9llo \xE2\x96\x81");
  EXPECT_EQ(m.require_array_strings("a.strings"), strs);
  EXPECT_EQ(m.require_array_f32("a.f32"), f32s);
  EXPECT_EQ(m.require_array_i32("a.i32"), i32s);
  EXPECT_EQ(m.find("a.u32")->array_type(), GgufValueType::u32);
  EXPECT_EQ(m.find("a.u32")->at(1).as_u64(), 8u);
  EXPECT_EQ(m.find("a.i64")->at(0).as_i64(), -9);
  EXPECT_EQ(m.find("a.u8")->array_size(), 3u);
  EXPECT_EQ(m.find("a.u8")->at(2).as_u64(), 255u);
}

void check_tensor_round_trip(uint32_t alignment) {
  TempDir dir;
  auto tensors = sample_tensors();
  tensors.pop_back();  // GGUF has no 0-d tensors
  GgufWriter w(alignment);
  w.add_string("general.architecture", "llama");
  for (const auto& [name, t] : tensors) w.add_tensor(name, *ggml_type_of(t.dtype()), t.shape());
  const std::string path = dir.file("t.gguf");
  w.open(path);
  for (const auto& [name, t] : tensors) w.write_tensor(name, t);
  w.finish();

  auto f = GgufFile::open(path);
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_EQ(f->data_offset() % alignment, 0u);
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const GgufTensorInfo& info = f->tensor_info(name);
    EXPECT_EQ(info.shape, t.shape()) << name;
    // ne is the reverse of the row-major shape.
    std::vector<uint64_t> ne(t.shape().rbegin(), t.shape().rend());
    EXPECT_EQ(info.ne, ne) << name;
    EXPECT_EQ(info.offset % alignment, 0u) << name;
    EXPECT_TRUE(same_bytes(f->tensor(name), t)) << name;
  }
  EXPECT_EQ(std::filesystem::file_size(path) % alignment, 0u);  // last tensor padded too
}

TEST(SynthGgufWriter, tensors_round_trip_with_default_alignment) { check_tensor_round_trip(32); }
TEST(SynthGgufWriter, tensors_round_trip_with_alignment_64) { check_tensor_round_trip(64); }

TEST(SynthGgufWriter, q8_0_blocks_are_written_as_given) {
  TempDir dir;
  std::vector<BlockQ8_0> blocks(4);  // [2, 64] = 2 rows of 2 blocks
  for (size_t b = 0; b < blocks.size(); ++b) {
    blocks[b].d = f32_to_f16(0.5f * (b + 1));
    for (int j = 0; j < 32; ++j) blocks[b].qs[j] = static_cast<int8_t>(j - 16);
  }
  GgufWriter w;
  EXPECT_EQ(w.add_tensor("q", GgmlType::q8_0, {2, 64}), 4 * sizeof(BlockQ8_0));
  EXPECT_THROW(w.add_tensor("bad", GgmlType::q8_0, {2, 48}), Error);  // rows not whole blocks
  const std::string path = dir.file("q.gguf");
  w.open(path);
  w.write_tensor("q", blocks.data(), blocks.size() * sizeof(BlockQ8_0));
  w.finish();
  auto f = GgufFile::open(path);
  Tensor v = f->dequantize("q");
  EXPECT_EQ(v.shape(), (Shape{2, 64}));
  EXPECT_FLOAT_EQ(v.get({1, 32 + 20}), 2.0f * 4);  // block 3: d = 2, q = 4
}

TEST(SynthGgufWriter, refuses_misuse) {
  TempDir dir;
  GgufWriter w;
  w.add_tensor("a", GgmlType::f32, {4});
  w.add_tensor("b", GgmlType::f16, {4});
  EXPECT_THROW(w.add_tensor("a", GgmlType::f32, {4}), Error);
  EXPECT_THROW(w.add_tensor("c", GgmlType::f32, {1, 1, 1, 1, 1}), Error);
  EXPECT_THROW(w.add_tensor("d", GgmlType::f32, {0}), Error);
  EXPECT_THROW(GgufWriter(48), Error);
  const std::string path = dir.file("m.gguf");
  w.open(path);
  EXPECT_THROW(w.add_u32("late", 1), Error);
  float four[4] = {};
  EXPECT_THROW(w.write_tensor("b", four, 8), Error);   // out of order
  EXPECT_THROW(w.write_tensor("a", four, 12), Error);  // wrong size
  w.write_tensor("a", four, 16);
  EXPECT_THROW(w.write_tensor("b", ramp({4}, DType::bf16, 1)), Error);  // wrong type
  EXPECT_THROW(w.finish(), Error);
}

}  // namespace
}  // namespace refit

// Q8_0 quantization must equal llama-quantize's: the oracle pack's Q8_0 llama file was made
// from its F32 file with `llama-quantize --pure`, so quantizing the F32 tensors must give
// the Q8_0 file's bytes exactly.
#include "formats/gguf_quantize.h"

namespace refit {
namespace {

TEST(SynthQuantize, q8_0_of_the_oracle_f32_model_equals_llama_quantize_output) {
  const std::string dir = testing::kOracle + "/llamacpp/";
  auto f32 = GgufFile::open(dir + "llama-f32/micro-llama-f32-s1.gguf");
  auto q8 = GgufFile::open(dir + "llama-q8_0/micro-llama-q8_0-s1.gguf");
  int checked = 0;
  for (const GgufTensorInfo& info : q8->tensors()) {
    if (info.type != GgmlType::q8_0) continue;
    Tensor x = f32->tensor(info.name);
    ASSERT_EQ(x.shape(), info.shape) << info.name;
    std::vector<BlockQ8_0> blocks(static_cast<size_t>(x.numel() / kQK8_0));
    quantize_row_q8_0(x.data<float>(), blocks.data(), x.numel());
    GgmlTensorView want = q8->raw(info.name);
    ASSERT_EQ(want.bytes.nbytes(), blocks.size() * sizeof(BlockQ8_0)) << info.name;
    EXPECT_EQ(std::memcmp(want.bytes.raw_data(), blocks.data(), want.bytes.nbytes()), 0)
        << info.name;
    ++checked;
  }
  EXPECT_GE(checked, 4 * 7 + 2);  // every layer's 7 matrices, token_embd, output
  std::vector<BlockQ8_0> one(1);
  float bad[31] = {};
  EXPECT_THROW(quantize_row_q8_0(bad, one.data(), 31), Error);
}

}  // namespace
}  // namespace refit
