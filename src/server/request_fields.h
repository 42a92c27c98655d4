// How the server treats request fields it does not know: accepted and ignored, as vLLM
// and SGLang do (real clients send fields of newer versions, or of the other engine),
// and logged once per (endpoint, field) so an operator can see what was ignored. Fields
// the server does know are validated strictly by their parsers.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

namespace refit {

// Logs "<endpoint>: ignoring unknown request field '<field>'" to stderr the first time
// this pair is seen. Thread-safe.
void ignore_unknown_field(const std::string& endpoint, const std::string& field);

// Every key of the object `body` not in `known` is ignored (and logged once).
void ignore_unknown_fields(const nlohmann::json& body, std::initializer_list<const char*> known,
                           const std::string& endpoint);

// The distinct (endpoint, field) pairs ignored so far (for /metrics and tests).
size_t ignored_field_count();

}  // namespace refit
