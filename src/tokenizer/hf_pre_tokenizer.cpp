#include "tokenizer/hf_pre_tokenizer.h"

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

namespace refit {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw FormatError(fmt::format("{}: tokenizer.json pre_tokenizer {}", source, message));
}

// Regex for an HF Split pattern given as a plain string: quote every character.
std::string quote_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// Regex steps must all come before ByteLevel: after it they would see GPT-2 characters, and
// ByteLevel's prefix space is added to every piece the earlier steps cut, which the encoder
// (one prefix per text fragment) does not do. Metaspace stands alone.
void add_regex(HfPreTokenizer& shape, std::string regex, const char* type,
               const std::string& source) {
  if (shape.byte_level || shape.metaspace)
    fail(source, fmt::format("{} after {} is not supported", type,
                             shape.metaspace ? "Metaspace" : "ByteLevel"));
  shape.regexes.push_back(std::move(regex));
}

std::string walk(const json& p, const std::string& source, HfPreTokenizer& shape, int depth);

std::string walk_sequence(const json& p, const std::string& source, HfPreTokenizer& shape,
                          int depth) {
  if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array())
    fail(source, "Sequence has no \"pretokenizers\" array");
  std::vector<std::string> parts;
  for (const json& inner : p["pretokenizers"])
    parts.push_back(walk(inner, source, shape, depth + 1));
  return fmt::format("Sequence[{}]", fmt::join(parts, ", "));
}

std::string walk_byte_level(const json& p, const std::string& source, HfPreTokenizer& shape) {
  if (shape.byte_level || shape.metaspace) fail(source, "ByteLevel twice, or after Metaspace");
  shape.add_prefix_space = p.value("add_prefix_space", false);
  if (shape.add_prefix_space && !shape.regexes.empty())
    fail(source, "ByteLevel(add_prefix_space=true) after a splitting step is not supported");
  if (p.value("use_regex", true)) shape.regexes.push_back(gpt2_pre_tokenizer_regex());
  shape.byte_level = true;
  return shape.add_prefix_space ? "ByteLevel(add_prefix_space)" : "ByteLevel";
}

std::string walk_split(const json& p, const std::string& source, HfPreTokenizer& shape) {
  std::string behavior = p.value("behavior", "Isolated");
  if (behavior != "Isolated" || p.value("invert", false))
    fail(source, fmt::format("Split with behavior '{}'{} is not supported (only Isolated, not "
                             "inverted)",
                             behavior, p.value("invert", false) ? " and invert" : ""));
  const json& pattern = p.value("pattern", json::object());
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
    add_regex(shape, pattern["Regex"].get<std::string>(), "Split", source);
  } else if (pattern.contains("String") && pattern["String"].is_string()) {
    add_regex(shape, quote_regex(pattern["String"].get<std::string>()), "Split", source);
  } else {
    fail(source, "Split has no Regex or String pattern");
  }
  return "Split";
}

std::string walk_digits(const json& p, const std::string& source, HfPreTokenizer& shape) {
  bool individual = p.value("individual_digits", false);
  add_regex(shape, individual ? R"(\p{N})" : R"(\p{N}+)", "Digits", source);
  return individual ? "Digits(individual)" : "Digits";
}

std::string walk_punctuation(const json& p, const std::string& source, HfPreTokenizer& shape) {
  // HF counts ASCII punctuation and Unicode P* as punctuation.
  std::string behavior = p.value("behavior", "Isolated");
  if (behavior != "Isolated" && behavior != "Contiguous")
    fail(source, fmt::format("Punctuation with behavior '{}' is not supported", behavior));
  add_regex(shape,
            behavior == "Contiguous" ? R"([\p{P}!-/:-@\[-`{-~]+)" : R"([\p{P}!-/:-@\[-`{-~])",
            "Punctuation", source);
  return "Punctuation";
}

// tokenizers 0.23's Metaspace deserializer: prepend_scheme defaults to "always", a legacy
// add_prefix_space=false means "never" (and contradicts any other declared scheme), split
// defaults to true.
std::string walk_metaspace(const json& p, const std::string& source, HfPreTokenizer& shape) {
  if (shape.byte_level || shape.metaspace || !shape.regexes.empty())
    fail(source, "Metaspace combined with other pre-tokenizers is not supported");
  MetaspaceOptions m;
  if (!p.contains("replacement") || !p["replacement"].is_string())
    fail(source, "Metaspace has no \"replacement\"");
  m.replacement = p["replacement"].get<std::string>();
  std::string scheme = p.value("prepend_scheme", "always");
  if (scheme == "always") {
    m.prepend = PrependScheme::always;
  } else if (scheme == "first") {
    m.prepend = PrependScheme::first;
  } else if (scheme == "never") {
    m.prepend = PrependScheme::never;
  } else {
    fail(source, fmt::format("Metaspace prepend_scheme '{}' is unknown", scheme));
  }
  if (p.contains("add_prefix_space") && p["add_prefix_space"].is_boolean() &&
      !p["add_prefix_space"].get<bool>()) {
    if (m.prepend != PrependScheme::never)
      fail(source, "Metaspace add_prefix_space=false does not match its prepend_scheme");
    m.prepend = PrependScheme::never;
  }
  m.split = p.value("split", true);
  shape.metaspace = m;
  return fmt::format("Metaspace(prepend_scheme={}, split={})", scheme, m.split);
}

std::string walk(const json& p, const std::string& source, HfPreTokenizer& shape, int depth) {
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
    fail(source, "is not an object with a \"type\"");
  if (depth > 64) fail(source, "Sequence nests too deeply");
  const std::string type = p["type"];
  if (type == "Sequence") return walk_sequence(p, source, shape, depth);
  if (type == "ByteLevel") return walk_byte_level(p, source, shape);
  if (type == "Split") return walk_split(p, source, shape);
  if (type == "Digits") return walk_digits(p, source, shape);
  if (type == "Punctuation") return walk_punctuation(p, source, shape);
  if (type == "Metaspace") return walk_metaspace(p, source, shape);
  fail(source, fmt::format("'{}' is not supported (refit runs Sequence, ByteLevel, Split, Digits, "
                           "Punctuation and Metaspace)",
                           type));
}

}  // namespace

HfPreTokenizer pre_tokenizer_from_hf(const json& pre_tokenizer, const std::string& source) {
  HfPreTokenizer shape;
  shape.description = pre_tokenizer.is_null() ? "none" : walk(pre_tokenizer, source, shape, 0);
  return shape;
}

}  // namespace refit
