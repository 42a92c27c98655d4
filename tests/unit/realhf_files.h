// Reading ../shared/realhf (real Hugging Face metadata and the references made from it:
// its README says what each file holds) in the tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace refit::testing {

inline const std::filesystem::path kRealHf = std::filesystem::path(REFIT_SHARED_DIR) / "realhf";

// A JSON file; nlohmann::ordered_json keeps key order, as a client's request does.
template <class Json = nlohmann::json>
Json read_realhf_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return Json::parse(in);
}

}  // namespace refit::testing
