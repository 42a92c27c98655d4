#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/merge.h"

namespace refit {

namespace {

struct ByteTables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> code_point_to_byte;  // every mapped code point is below U+0144
  ByteTables() {
    code_point_to_byte.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      uint32_t cp = printable ? b : next_extra++;
      std::string utf8;
      if (cp < 0x80) {
        utf8 += static_cast<char>(cp);
      } else {  // all mapped code points are below U+0800: two bytes
        utf8 += static_cast<char>(0xC0 | (cp >> 6));
        utf8 += static_cast<char>(0x80 | (cp & 0x3F));
      }
      byte_to_utf8[b] = std::move(utf8);
      code_point_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const auto& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

std::optional<uint8_t> byte_level_byte(uint32_t code_point) {
  if (code_point >= 512) return std::nullopt;
  int16_t b = tables().code_point_to_byte[code_point];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    auto lead = static_cast<uint8_t>(text[i]);
    size_t n = std::min(utf8_sequence_length(lead), text.size() - i);
    uint32_t cp = lead;
    if (n == 2) cp = ((lead & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
    // A lone byte >= 0x80 is malformed UTF-8, not the code point of the same value.
    bool decodable = n == 2 || (n == 1 && lead < 0x80);
    std::optional<uint8_t> b = decodable ? byte_level_byte(cp) : std::nullopt;
    if (b) {
      out += static_cast<char>(*b);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace refit
