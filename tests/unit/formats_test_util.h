// Helpers for the formats tests: a temp directory, byte builders for GGUF and safetensors
// files (so malformed variants can be written byte by byte), and an assertion that a call
// fails with a FormatError whose message names the file and the problem.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace refit::testing {

inline const std::string kOracle = std::string(REFIT_SHARED_DIR) + "/oracle";

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("refit_formats_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(file(name), std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file(name);
  }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

// Runs fn; passes when it throws FormatError whose message contains every needle.
inline void expect_format_error(const std::function<void()>& fn, std::vector<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected a FormatError containing '" << (needles.empty() ? "" : needles[0])
                  << "'";
  } catch (const FormatError& e) {
    std::string msg = e.what();
    for (const auto& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg << "\nmissing: " << n;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected FormatError, got another exception: " << e.what();
  }
}

// Little-endian byte appenders.
template <typename T>
inline void put(std::string& s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}
inline void put_gguf_string(std::string& s, const std::string& v) {
  put<uint64_t>(s, v.size());
  s += v;
}

// Builds GGUF files entry by entry; raw_kv lets a test write any bytes for a value.
struct GgufBuilder {
  uint32_t version = 3;
  uint64_t n_kv = 0, n_tensors = 0;
  std::string kvs, infos, data;
  uint32_t alignment = 32;

  void raw_kv(const std::string& key, uint32_t type, const std::string& value_bytes) {
    put_gguf_string(kvs, key);
    put<uint32_t>(kvs, type);
    kvs += value_bytes;
    ++n_kv;
  }
  template <typename T>
  void kv(const std::string& key, uint32_t type, T v) {
    std::string b;
    put<T>(b, v);
    raw_kv(key, type, b);
  }
  void kv_u32(const std::string& key, uint32_t v) { kv(key, 4, v); }
  void kv_f32(const std::string& key, float v) { kv(key, 6, v); }
  void kv_str(const std::string& key, const std::string& v) {
    std::string b;
    put_gguf_string(b, v);
    raw_kv(key, 8, b);
  }
  void kv_strings(const std::string& key, const std::vector<std::string>& v) {
    std::string b;
    put<uint32_t>(b, 8);
    put<uint64_t>(b, v.size());
    for (const auto& s : v) put_gguf_string(b, s);
    raw_kv(key, 9, b);
  }
  void set_alignment(uint32_t a) {
    alignment = a;
    kv_u32("general.alignment", a);
  }
  // Adds a tensor; its bytes go at the next aligned data offset unless `offset` is given.
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
              const std::string& bytes, int64_t offset = -1) {
    while (data.size() % alignment) data.push_back('\0');
    uint64_t off = offset >= 0 ? static_cast<uint64_t>(offset) : data.size();
    if (offset < 0) data += bytes;
    put_gguf_string(infos, name);
    put<uint32_t>(infos, static_cast<uint32_t>(ne.size()));
    for (auto d : ne) put<uint64_t>(infos, d);
    put<uint32_t>(infos, type);
    put<uint64_t>(infos, off);
    ++n_tensors;
  }
  std::string build() const {
    std::string s = "GGUF";
    put<uint32_t>(s, version);
    put<uint64_t>(s, n_tensors);
    put<uint64_t>(s, n_kv);
    s += kvs;
    s += infos;
    while (s.size() % alignment) s.push_back('\0');
    return s + data;
  }
};

// safetensors file from a JSON header text and a data section.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string s;
  put<uint64_t>(s, header.size());
  return s + header + data;
}

inline std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

}  // namespace refit::testing
