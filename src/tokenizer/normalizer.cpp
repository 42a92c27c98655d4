#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/normalizer.h"

#include <fmt/ranges.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace refit {

namespace {

using json = nlohmann::json;
using Kind = NormalizerStep::Kind;

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw FormatError(fmt::format("{}: tokenizer.json normalizer {}", source, message));
}

void append_utf8(std::string& out, int32_t cp) {
  uint8_t buf[4];
  ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Calls f(code point) for each character; an invalid byte is passed as -1 - byte, so callers
// can keep it as it was (tokenizers never sees invalid UTF-8; refit's callers may).
template <typename F>
void for_each_char(std::string_view text, F&& f) {
  auto p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    int32_t cp = 0;
    utf8proc_ssize_t n =
        utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n <= 0) {
      f(-1 - static_cast<int32_t>(p[i]), text.substr(i, 1));
      ++i;
    } else {
      f(cp, text.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    }
  }
}

std::string unicode_form(std::string_view text, Kind kind) {
  int options = UTF8PROC_STABLE;
  if (kind == Kind::nfc || kind == Kind::nfkc) options |= UTF8PROC_COMPOSE;
  if (kind == Kind::nfd || kind == Kind::nfkd) options |= UTF8PROC_DECOMPOSE;
  if (kind == Kind::nfkc || kind == Kind::nfkd) options |= UTF8PROC_COMPAT;
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  // Invalid UTF-8 has no normal form; it is left as it is rather than refused, because it
  // can only come from a caller's bytes (every text tokenizers accepts is valid UTF-8).
  if (n < 0) return std::string(text);
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_char(text, [&](int32_t cp, std::string_view bytes) {
    if (cp < 0) {
      out.append(bytes);
    } else if (cp == 0x130) {
      // The one unconditional multi-character lowercase mapping (SpecialCasing.txt), which
      // Rust's char::to_lowercase applies and utf8proc's simple mapping does not.
      out.append("i\xCC\x87");
    } else {
      append_utf8(out, utf8proc_tolower(cp));
    }
  });
  return out;
}

// Unicode White_Space, what Rust's char::is_whitespace (and so HF Strip) tests.
bool is_white_space(int32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t first = text.size(), last = 0, pos = 0;  // the first and past-the-last non-space bytes
  for_each_char(text, [&](int32_t cp, std::string_view bytes) {
    if (cp < 0 || !is_white_space(cp)) {
      first = std::min(first, pos);
      last = pos + bytes.size();
    }
    pos += bytes.size();
  });
  if (first == text.size()) return (left || right) ? std::string() : std::string(text);
  size_t begin = left ? first : 0, end = right ? last : text.size();
  return std::string(text.substr(begin, end - begin));
}

std::string strip_accents(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_char(text, [&](int32_t cp, std::string_view bytes) {
    if (cp >= 0) {
      utf8proc_category_t c = utf8proc_category(cp);
      if (c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME)
        return;
    }
    out.append(bytes);
  });
  return out;
}

// A pattern given as {"String": s} or {"Regex": r}.
void read_pattern(const json& n, const std::string& source, NormalizerStep& step) {
  const json& pattern = n.value("pattern", json());
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    step.pattern = pattern["String"].get<std::string>();
  } else if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    step.pattern = pattern["Regex"].get<std::string>();
    step.regex = true;
  } else {
    fail(source, "Replace has no String or Regex pattern");
  }
}

std::string string_field(const json& n, const char* key, const char* type,
                         const std::string& source) {
  if (!n.contains(key) || !n[key].is_string())
    fail(source, fmt::format("{} has no string \"{}\"", type, key));
  return n[key].get<std::string>();
}

void walk(const json& n, const std::string& source, std::vector<NormalizerStep>& steps, int depth) {
  if (n.is_null()) return;
  if (!n.is_object() || !n.contains("type") || !n["type"].is_string())
    fail(source, "is not an object with a \"type\"");
  if (depth > 64) fail(source, "Sequence nests too deeply");
  const std::string type = n["type"];
  NormalizerStep step;
  if (type == "Sequence") {
    if (!n.contains("normalizers") || !n["normalizers"].is_array())
      fail(source, "Sequence has no \"normalizers\" array");
    for (const json& inner : n["normalizers"]) walk(inner, source, steps, depth + 1);
    return;
  } else if (type == "NFC") {
    step.kind = Kind::nfc;
  } else if (type == "NFD") {
    step.kind = Kind::nfd;
  } else if (type == "NFKC") {
    step.kind = Kind::nfkc;
  } else if (type == "NFKD") {
    step.kind = Kind::nfkd;
  } else if (type == "Lowercase") {
    step.kind = Kind::lowercase;
  } else if (type == "StripAccents") {
    step.kind = Kind::strip_accents;
  } else if (type == "Strip") {
    step.kind = Kind::strip;
    step.left = n.value("strip_left", true);
    step.right = n.value("strip_right", true);
  } else if (type == "Replace") {
    step.kind = Kind::replace;
    read_pattern(n, source, step);
    step.content = string_field(n, "content", "Replace", source);
  } else if (type == "Prepend") {
    step.kind = Kind::prepend;
    step.content = string_field(n, "prepend", "Prepend", source);
  } else {
    fail(source, fmt::format("'{}' is not supported (refit runs NFC, NFD, NFKC, NFKD, Lowercase, "
                             "Strip, StripAccents, Replace, Prepend and Sequence)",
                             type));
  }
  steps.push_back(std::move(step));
}

}  // namespace

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos;
       pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(text.substr(pos));
  return out;
}

std::vector<NormalizerStep> normalizer_from_hf(const json& normalizer, const std::string& source) {
  std::vector<NormalizerStep> steps;
  walk(normalizer, source, steps, 0);
  return steps;
}

std::string describe_normalizer(const std::vector<NormalizerStep>& steps) {
  std::vector<std::string> parts;
  for (const NormalizerStep& s : steps) {
    switch (s.kind) {
      case Kind::nfc:
        parts.push_back("NFC");
        break;
      case Kind::nfd:
        parts.push_back("NFD");
        break;
      case Kind::nfkc:
        parts.push_back("NFKC");
        break;
      case Kind::nfkd:
        parts.push_back("NFKD");
        break;
      case Kind::lowercase:
        parts.push_back("Lowercase");
        break;
      case Kind::strip_accents:
        parts.push_back("StripAccents");
        break;
      case Kind::strip:
        parts.push_back(fmt::format("Strip(left={}, right={})", s.left, s.right));
        break;
      case Kind::replace:
        parts.push_back(fmt::format("Replace({} '{}' -> '{}')", s.regex ? "regex" : "string",
                                    s.pattern, s.content));
        break;
      case Kind::prepend:
        parts.push_back(fmt::format("Prepend('{}')", s.content));
        break;
    }
  }
  if (parts.size() == 1) return parts[0];
  return fmt::format("Sequence[{}]", fmt::join(parts, ", "));
}

struct Normalizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Normalizer::Normalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {
  for (const NormalizerStep& s : steps_) {
    if (s.kind != Kind::replace || !s.regex) {
      regexes_.push_back(nullptr);
      continue;
    }
    auto compiled = std::make_unique<Compiled>();
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(s.pattern.data()), s.pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code,
                                   &error_offset, nullptr);
    if (!compiled->code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      throw Error(fmt::format("normalizer Replace regex does not compile at offset {}: {} ({})",
                              error_offset, reinterpret_cast<const char*>(message), s.pattern));
    }
    regexes_.push_back(std::move(compiled));
  }
}

Normalizer::~Normalizer() = default;

namespace {

std::string replace_regex(pcre2_code* code, std::string_view text, const std::string& content) {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
  if (!match) throw Error("normalizer: out of memory creating PCRE2 match data");
  std::string out;
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0, emitted = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), start, 0, match, nullptr);
    if (rc < 0) break;  // no match (or an error on hostile input: leave the rest)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
    if (ov[1] == ov[0]) {  // an empty match replaces nothing, as in tokenizers
      start = ov[0] + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    out.append(text.substr(emitted, ov[0] - emitted));
    out.append(content);
    emitted = start = ov[1];
  }
  pcre2_match_data_free(match);
  out.append(text.substr(emitted));
  return out;
}

}  // namespace

std::string Normalizer::normalize(std::string_view text) const {
  std::string s(text);
  for (size_t i = 0; i < steps_.size(); ++i) {
    const NormalizerStep& step = steps_[i];
    switch (step.kind) {
      case Kind::nfc:
      case Kind::nfd:
      case Kind::nfkc:
      case Kind::nfkd:
        s = unicode_form(s, step.kind);
        break;
      case Kind::lowercase:
        s = lowercase(s);
        break;
      case Kind::strip:
        s = strip(s, step.left, step.right);
        break;
      case Kind::strip_accents:
        s = strip_accents(s);
        break;
      case Kind::replace:
        s = step.regex ? replace_regex(regexes_[i]->code, s, step.content)
                       : replace_all(s, step.pattern, step.content);
        break;
      case Kind::prepend:
        if (!s.empty()) s = step.content + s;
        break;
    }
  }
  return s;
}

}  // namespace refit
