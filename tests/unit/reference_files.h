// Readers for the reference files of llama.cpp runs (../shared/oracle/llamacpp and
// tests/data/llamacpp): `key: value` token files and raw little-endian f32 logits.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace refit::testing {

inline std::map<std::string, std::string> read_key_values(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::map<std::string, std::string> kv;
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    kv[line.substr(0, colon)] = line.substr(colon + 1);
  }
  return kv;
}

inline std::vector<int32_t> ids_of(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  int32_t id;
  while (in >> id) ids.push_back(id);
  return ids;
}

inline std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in) << path;
  std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

}  // namespace refit::testing
