// Parsing JSON that arrives from files (config.json, tokenizer.json, safetensors headers)
// with a nesting limit checked while parsing: a value nested a million deep would
// otherwise overflow the stack when it is later destroyed, copied or printed. No real
// checkpoint or tokenizer file nests deeper than a few levels.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace refit {

constexpr int kMaxJsonFileDepth = 128;

// Parses [begin, end); throws FormatError naming `source` when the text nests deeper than
// kMaxJsonFileDepth (and nlohmann's parse_error when it is not JSON: callers word that).
// `on_event`, when given, sees every parse event too (return false to drop a value, as nlohmann's
// callback).
nlohmann::json parse_json_limited(const char* begin, const char* end, const std::string& source,
                                  const nlohmann::json::parser_callback_t& on_event = nullptr);

}  // namespace refit
