#include "server/base64.h"

#include <array>
#include <cstdint>

#include "core/error.h"

namespace refit {

std::string base64_decode(const std::string& text) {
  static const auto table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(a[i])] = static_cast<int8_t>(i);
    t['-'] = 62;  // URL-safe alphabet too
    t['_'] = 63;
    return t;
  }();
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '=') break;
    if (c == '\n' || c == '\r') continue;
    const int v = table[c];
    if (v < 0) fail("base64: invalid character at offset {}", i);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::string base64_encode(const void* data, size_t n) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* b = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t{b[i]} << 16) | (i + 1 < n ? uint32_t{b[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{b[i + 2]} : 0);
    out.push_back(a[(v >> 18) & 63]);
    out.push_back(a[(v >> 12) & 63]);
    out.push_back(i + 1 < n ? a[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < n ? a[v & 63] : '=');
  }
  return out;
}

}  // namespace refit
