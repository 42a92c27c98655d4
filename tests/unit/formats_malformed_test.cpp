// Malformed checkpoints: each lie a file can tell (truncation, sizes and offsets that point
// elsewhere, absurd counts, overlapping tensors, bad UTF-8, unknown dtypes) must give a
// FormatError naming the file and the problem — never a crash or an unbounded allocation.
// The files are built byte by byte in a temp directory.
#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "formats/hf_folder.h"
#include "formats/llama2c.h"
#include "formats/safetensors.h"
#include "formats_test_util.h"
#include "models/model_config.h"

namespace refit {
namespace {
using namespace refit::testing;

GgufBuilder small_gguf() {
  GgufBuilder b;
  b.kv_str("general.architecture", "llama");
  b.kv_strings("tokenizer.ggml.tokens", {"a", "b"});
  b.tensor("w", {32, 2}, 0, f32_bytes(std::vector<float>(64, 0.5f)));
  b.tensor("q", {32}, 8, std::string(34, '\1'));
  return b;
}

void expect_gguf_error(const std::string& bytes, std::vector<std::string> needles) {
  TempDir dir;
  std::string path = dir.write("bad.gguf", bytes);
  needles.insert(needles.begin(), path);
  expect_format_error([&] { GgufFile::open(path); }, needles);
}

TEST(FormatsMalformed, gguf_every_truncation_is_a_format_error) {
  const std::string full = small_gguf().build();
  TempDir dir;
  for (size_t n = 0; n < full.size(); ++n) {
    std::string path = dir.write("cut.gguf", full.substr(0, n));
    EXPECT_THROW(GgufFile::open(path), FormatError) << "prefix of " << n << " bytes";
  }
  EXPECT_NO_THROW(GgufFile::open(dir.write("ok.gguf", full)));
}

TEST(FormatsMalformed, gguf_header_lies) {
  std::string s = small_gguf().build();
  expect_gguf_error("GGUX" + s.substr(4), {"not a GGUF file"});
  std::string v = s;
  v[4] = 1;
  expect_gguf_error(v, {"version 1"});
  v[4] = 9;
  expect_gguf_error(v, {"unknown GGUF version 9"});
  GgufBuilder b = small_gguf();
  b.n_kv = 1ull << 60;  // absurd metadata count
  expect_gguf_error(b.build(), {"metadata count", "impossible"});
  b = small_gguf();
  b.n_tensors = 0xFFFFFFFFFFFFull;
  expect_gguf_error(b.build(), {"tensor count", "impossible"});
}

TEST(FormatsMalformed, gguf_metadata_lies) {
  GgufBuilder b;
  std::string huge;
  put<uint64_t>(huge, 1ull << 62);  // a string claiming 2^62 bytes
  b.raw_kv("k", 8, huge);
  expect_gguf_error(b.build(), {"claims", "bytes"});

  b = GgufBuilder();
  std::string arr;  // array of u32 claiming 2^61 elements
  put<uint32_t>(arr, 4);
  put<uint64_t>(arr, 1ull << 61);
  b.raw_kv("arr", 9, arr);
  expect_gguf_error(b.build(), {"array 'arr' element count", "impossible"});

  b = GgufBuilder();
  std::string nested;  // arrays nested 20 deep
  for (int i = 0; i < 20; ++i) put<uint32_t>(nested, 9), put<uint64_t>(nested, 1);
  put<uint32_t>(nested, 4);
  put<uint64_t>(nested, 0);
  b.raw_kv("deep", 9, nested);
  expect_gguf_error(b.build(), {"deep", "nests arrays"});

  b = GgufBuilder();
  b.kv_str("bad\xC3(key", "x");
  expect_gguf_error(b.build(), {"metadata key", "not valid UTF-8"});
  b = GgufBuilder();
  b.kv_str("ok", "caf\xE9");  // Latin-1, not UTF-8
  expect_gguf_error(b.build(), {"'ok'", "not valid UTF-8"});
  b = GgufBuilder();
  b.kv_strings("tokens", {"a", "\xED\xA0\x80"});  // an encoded surrogate
  expect_gguf_error(b.build(), {"tokens", "not valid UTF-8"});
  b = GgufBuilder();
  b.kv_u32("k", 1);
  b.kv_u32("k", 2);
  expect_gguf_error(b.build(), {"duplicate metadata key 'k'"});
  b = GgufBuilder();
  b.kv<uint32_t>("k", 13, 0);
  expect_gguf_error(b.build(), {"unknown value type 13"});
  b = GgufBuilder();
  b.kv<uint8_t>("flag", 7, 2);
  expect_gguf_error(b.build(), {"flag", "not 0 or 1"});
  b = GgufBuilder();
  b.kv_u32("general.alignment", 48);
  expect_gguf_error(b.build(), {"general.alignment 48", "power of two"});
  b = GgufBuilder();
  b.kv_str("general.alignment", "32");
  expect_gguf_error(b.build(), {"general.alignment", "u32", "string"});
}

TEST(FormatsMalformed, gguf_tensor_infos_that_lie) {
  auto with_tensor = [](std::vector<uint64_t> ne, uint32_t type, int64_t offset,
                        size_t data_bytes) {
    GgufBuilder b;
    b.tensor("t", ne, type, std::string(data_bytes, '\0'), offset);
    if (offset >= 0) b.data = std::string(data_bytes, '\0');
    return b.build();
  };
  expect_gguf_error(with_tensor({1, 1, 1, 1, 1}, 0, -1, 4), {"'t'", "5 dimensions"});
  expect_gguf_error(with_tensor({1ull << 40, 1ull << 40}, 0, -1, 4), {"'t'", "overflow"});
  expect_gguf_error(with_tensor({4}, 77, -1, 16), {"'t'", "unknown ggml type id 77"});
  expect_gguf_error(with_tensor({33}, 8, -1, 34), {"'t'", "not a multiple of the block size 32"});
  expect_gguf_error(with_tensor({4}, 0, 8, 64), {"'t'", "offset 8", "alignment 32"});
  expect_gguf_error(with_tensor({4}, 0, 1 << 20, 64), {"'t'", "past the end of the file"});
  expect_gguf_error(with_tensor({1000}, 0, -1, 64), {"'t'", "past the end of the file"});
  GgufBuilder b;
  b.data = std::string(256, '\0');
  b.tensor("a", {32}, 0, "", 0);
  b.tensor("b", {8}, 0, "", 96);  // a is [0, 128): b starts inside it
  expect_gguf_error(b.build(), {"'a'", "'b'", "overlap"});
  b = GgufBuilder();
  b.tensor("dup", {4}, 0, std::string(16, '\0'));
  b.tensor("dup", {4}, 0, std::string(16, '\0'));
  expect_gguf_error(b.build(), {"duplicate tensor name 'dup'"});
  b = GgufBuilder();
  b.tensor("bad\xFFname", {4}, 0, std::string(16, '\0'));
  expect_gguf_error(b.build(), {"tensor name", "not valid UTF-8"});
}

// ---- safetensors ----

void expect_st_error(const std::string& bytes, std::vector<std::string> needles) {
  TempDir dir;
  std::string path = dir.write("bad.safetensors", bytes);
  needles.insert(needles.begin(), path);
  expect_format_error([&] { SafetensorsFile::open(path); }, needles);
}

const std::string kGoodHeader =
    R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[16,24]},"__metadata__":{"format":"pt"}})";

TEST(FormatsMalformed, safetensors_every_truncation_is_a_format_error) {
  const std::string full = safetensors_bytes(kGoodHeader, std::string(24, '\0'));
  TempDir dir;
  for (size_t n = 0; n < full.size(); ++n) {
    std::string path = dir.write("cut.safetensors", full.substr(0, n));
    EXPECT_THROW(SafetensorsFile::open(path), FormatError) << "prefix of " << n << " bytes";
  }
  auto f = SafetensorsFile::open(dir.write("ok.safetensors", full));
  EXPECT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->tensor("b").dtype(), DType::bf16);
}

TEST(FormatsMalformed, safetensors_header_and_entries_that_lie) {
  const std::string data(24, '\0');
  std::string s;
  put<uint64_t>(s, 1ull << 40);
  expect_st_error(s + "{}", {"header length", "exceeds"});
  s.clear();
  put<uint64_t>(s, 1000);
  expect_st_error(s + "{}", {"header length 1000", "past the end"});
  expect_st_error(safetensors_bytes("{\"a\":", data), {"not valid JSON"});
  expect_st_error(safetensors_bytes("[1,2]", data), {"must be a JSON object"});
  expect_st_error(
      safetensors_bytes(R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", data),
      {"'a'", "unknown or unsupported dtype 'F4'"});
  expect_st_error(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
      {"'a'", "needs 12 bytes", "give 8"});
  expect_st_error(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", data),
      {"'a'", "past the data section"});
  expect_st_error(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data),
      {"'a'", "begin after end"});
  expect_st_error(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", data),
      {"'a'", "non-negative integer"});
  expect_st_error(
      safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
          data),
      {"'a'", "'b'", "overlap"});
  expect_st_error(
      safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          data),
      {"duplicate tensor name 'a'"});
  expect_st_error(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", data),
                  {"'a'", "missing 'data_offsets'"});
  expect_st_error(safetensors_bytes(R"({"__metadata__":{"k":1}})", data),
                  {"__metadata__", "'k'", "string"});
  expect_st_error(safetensors_bytes("{\"caf\xE9\":{}}", data), {"not valid JSON"});
  expect_st_error(
      safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})",
          data),
      {"'a'", "overflow"});
}

// ---- llama2.c ----

std::string llama2c_header(int32_t dim, int32_t hidden, int32_t layers, int32_t heads,
                           int32_t kv_heads, int32_t vocab, int32_t seq) {
  std::string s;
  for (int32_t v : {dim, hidden, layers, heads, kv_heads, vocab, seq}) put<int32_t>(s, v);
  return s;
}

TEST(FormatsMalformed, llama2c_model_headers_that_lie) {
  TempDir dir;
  auto open = [&](const std::string& bytes) {
    std::string p = dir.write("m.bin", bytes);
    return [p] { Llama2cModel::open(p); };
  };
  expect_format_error(open("abc"), {"m.bin", "truncated"});
  expect_format_error(open(llama2c_header(0, 1, 1, 1, 1, 1, 1)), {"m.bin", "dim = 0"});
  expect_format_error(open(llama2c_header(8, 1, 1, 3, 1, 1, 1)),
                      {"m.bin", "not a multiple of n_heads"});
  expect_format_error(open(llama2c_header(8, 1, 1, 4, 3, 1, 1)), {"m.bin", "n_kv_heads"});
  expect_format_error(open(llama2c_header(1 << 30, 1, 1, 1, 1, 1, 1)), {"m.bin", "out of range"});
  // Plausible header, wrong body size: the only check a magic-less format allows.
  expect_format_error(open(llama2c_header(8, 16, 1, 2, 2, 10, 4) + std::string(100, '\0')),
                      {"m.bin", "implies", "the file has"});
  std::string v2 = "24ka";  // "ak42" magic, version 2
  put<int32_t>(v2, 2);
  expect_format_error(open(v2 + std::string(300, '\0')), {"m.bin", "version 2"});
}

TEST(FormatsMalformed, llama2c_tokenizers_that_lie) {
  TempDir dir;
  auto tok = [](std::vector<std::pair<float, std::string>> pieces, uint32_t max_len) {
    std::string s;
    put<uint32_t>(s, max_len);
    for (auto& [score, p] : pieces) {
      put<float>(s, score);
      put<int32_t>(s, static_cast<int32_t>(p.size()));
      s += p;
    }
    return s;
  };
  std::string path = dir.write("t.bin", tok({{0, "ab"}, {-1, "c"}}, 2));
  auto ok = read_llama2c_tokenizer(path, 2);
  EXPECT_EQ(ok.pieces, (std::vector<std::string>{"ab", "c"}));
  EXPECT_EQ(read_llama2c_tokenizer(path).pieces.size(), 2u);
  expect_format_error([&] { read_llama2c_tokenizer(path, 3); },
                      {path, "token count 3", "impossible"});
  const std::string cut = tok({{0, "ab"}}, 2);
  std::string cut_path = dir.write("cut.bin", cut.substr(0, cut.size() - 1));
  expect_format_error([&] { read_llama2c_tokenizer(cut_path, 1); },
                      {cut_path, "truncated", "bytes of token 0"});
  expect_format_error([&] { read_llama2c_tokenizer(path, 1); }, {path, "unexpected bytes"});
  expect_format_error([&] { read_llama2c_tokenizer(path, 1 << 30); },
                      {path, "token count", "impossible"});
  path = dir.write("t2.bin", tok({{0, "abc"}}, 2));
  expect_format_error([&] { read_llama2c_tokenizer(path, 1); }, {path, "token 0 has length 3"});
  std::string neg;
  put<uint32_t>(neg, 4);
  put<float>(neg, 0);
  put<int32_t>(neg, -5);
  path = dir.write("t3.bin", neg);
  expect_format_error([&] { read_llama2c_tokenizer(path); }, {path, "length -5"});
}

}  // namespace
}  // namespace refit

namespace refit {
namespace {

// A file nested a million levels deep is refused while parsing (destroying or printing
// such a value would overflow the stack), naming the file.
TEST(FormatsMalformed, json_files_nested_too_deep_are_refused_by_name) {
  TempDir dir;
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  const std::string config = dir.write("config.json", "{\"a\": " + deep + "}");
  try {
    read_json_file(config);
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: JSON nests deeper than 128 levels"),
              std::string::npos)
        << e.what();
  }
  try {
    config_from_hf_json("{\"hidden_size\": " + deep + "}", "cfg.json");
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: JSON nests deeper"), std::string::npos)
        << e.what();
  }
  std::string header = "{\"__metadata__\": " + deep + "}";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  const std::string st = dir.write("deep.safetensors", bytes + header);
  try {
    SafetensorsFile::open(st);
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("JSON nests deeper than 128 levels"), std::string::npos)
        << e.what();
  }
  // Real files nest a few levels: a 100-deep value is still read.
  const std::string ok =
      dir.write("ok.json", "{\"a\": " + std::string(100, '[') + std::string(100, ']') + "}");
  EXPECT_TRUE(read_json_file(ok).contains("a"));
}

}  // namespace
}  // namespace refit
