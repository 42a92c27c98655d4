// GPT-2's reversible byte <-> character mapping used by byte-level BPE vocabularies: every
// byte becomes a printable Unicode character (printable ASCII and most of Latin-1 map to
// themselves; the other 68 bytes map to U+0100.. in order), so a vocabulary of strings can
// hold arbitrary bytes. ' ' becomes 'Ġ' (U+0120) and '\n' becomes 'Ċ' (U+010A).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace refit {

// Maps every byte of `bytes` to its character's UTF-8 encoding.
std::string byte_level_encode(std::string_view bytes);
// Inverse of byte_level_encode. A character outside the mapping is kept as its own UTF-8
// bytes (a vocabulary may contain such tokens; dropping them would lose text).
std::string byte_level_decode(std::string_view text);
// The byte a code point stands for, nullopt when it is not one of the 256 mapped ones.
std::optional<uint8_t> byte_level_byte(uint32_t code_point);

}  // namespace refit
