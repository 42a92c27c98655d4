// Base64 for tensor bytes carried in JSON (RFC 4648 standard and URL-safe alphabets).
#pragma once

#include <string>

namespace refit {

// Base64 (padding optional, line breaks skipped) to bytes; throws Error naming the offset
// of the first invalid character.
std::string base64_decode(const std::string& text);

}  // namespace refit
