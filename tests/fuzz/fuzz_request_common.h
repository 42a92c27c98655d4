// Shared by the request-parser fuzz targets: a parser may refuse a body with HttpError (a
// 4xx naming the field) or refit::Error (a 400) and nothing else; any other exception is a
// 500 "internal error" the server would answer, and any crash, sanitizer report, leak or
// oversized allocation a bug. The vocabulary and context are the demo model's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "server/api_types.h"
#include "server/prompt_limits.h"
#include "synthetic/synthetic_vocab.h"
#include "tokenizer/tokenizer.h"

namespace refit::fuzz {

inline constexpr int64_t kContext = 2048;  // the demo preset's max_seq_len
inline constexpr int64_t kVocab = 32000;   // the demo preset's vocabulary

inline const Tokenizer& demo_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = synthetic_tokenizer(kVocab);
  return *tok;
}

inline const PromptLimits& demo_prompt_limits() {
  static const PromptLimits limits = prompt_limits(&demo_tokenizer(), kContext);
  return limits;
}

inline std::string body_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace refit::fuzz

#define REFIT_REQUEST_FUZZ_GUARD(body)  \
  try {                                 \
    body;                               \
  } catch (const ::refit::HttpError&) { \
  } catch (const ::refit::Error&) {     \
  }
