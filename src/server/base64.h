// Base64 for tensor bytes carried in JSON (RFC 4648 standard and URL-safe alphabets).
#pragma once

#include <cstddef>
#include <string>

namespace refit {

// Base64 (padding optional, line breaks skipped) to bytes; throws Error naming the offset
// of the first invalid character.
std::string base64_decode(const std::string& text);
// Bytes to standard base64 with padding.
std::string base64_encode(const void* data, size_t n);

}  // namespace refit
