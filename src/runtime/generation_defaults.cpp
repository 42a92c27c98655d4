#include "runtime/generation_defaults.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace refit {

bool GenerationDefaults::empty() const {
  return !temperature && !top_p && !top_k && !min_p && !repetition_penalty && !max_tokens &&
         !max_tokens_cap;
}

void GenerationDefaults::apply(SamplingParams& s, const SamplingFieldsGiven& given) const {
  if (temperature && !given.temperature) s.temperature = *temperature;
  if (top_p && !given.top_p) s.top_p = *top_p;
  if (top_k && !given.top_k) s.top_k = *top_k;
  if (min_p && !given.min_p) s.min_p = *min_p;
  if (repetition_penalty && !given.repetition_penalty) s.repetition_penalty = *repetition_penalty;
}

int64_t GenerationDefaults::max_tokens_for(std::optional<int64_t> requested,
                                           int64_t fallback) const {
  int64_t m = requested ? *requested : max_tokens.value_or(fallback);
  if (max_tokens_cap) m = std::min(m, *max_tokens_cap);
  return m;
}

nlohmann::ordered_json GenerationDefaults::fields_json() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (temperature) j["temperature"] = *temperature;
  if (top_p) j["top_p"] = *top_p;
  if (top_k) j["top_k"] = *top_k;
  if (min_p) j["min_p"] = *min_p;
  if (repetition_penalty) j["repetition_penalty"] = *repetition_penalty;
  if (max_tokens) j["max_tokens"] = *max_tokens;
  if (max_tokens_cap) j["max_tokens_cap"] = *max_tokens_cap;
  return j;
}

std::string GenerationDefaults::str() const {
  std::string fields;
  auto add = [&](const char* name, const std::string& value) {
    fields += fmt::format("{}{} {}", fields.empty() ? "" : ", ", name, value);
  };
  if (temperature) add("temperature", fmt::format("{}", *temperature));
  if (top_p) add("top_p", fmt::format("{}", *top_p));
  if (top_k) add("top_k", fmt::format("{}", *top_k));
  if (min_p) add("min_p", fmt::format("{}", *min_p));
  if (repetition_penalty) add("repetition_penalty", fmt::format("{}", *repetition_penalty));
  if (max_tokens) add("max_tokens", fmt::format("{}", *max_tokens));
  if (max_tokens_cap) add("max_tokens at most", fmt::format("{}", *max_tokens_cap));
  if (mode == "vllm") return "none (--generation-config vllm: engine defaults)";
  if (source.empty()) return "none (no generation_config.json)";
  return fmt::format("{} (from {})", fields.empty() ? "none" : fields, source);
}

GenerationDefaults read_generation_defaults(const nlohmann::json& config, const std::string& source,
                                            const std::string& mode) {
  GenerationDefaults d;
  d.mode = mode;
  if (mode == "vllm" || config.is_null()) return d;
  d.source = source;
  if (!config.is_object()) throw FormatError(fmt::format("{}: must be a JSON object", source));
  // A field is absent or null (transformers' None), or a number of the right kind in range.
  auto number = [&](const char* key, double transformers_default, auto in_range,
                    const char* range) -> std::optional<double> {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return std::nullopt;
    if (!it->is_number() || !std::isfinite(it->get<double>()))
      throw FormatError(
          fmt::format("{}: '{}' must be a number, got {} (or start with --generation-config vllm "
                      "to ignore the file's sampling defaults)",
                      source, key, it->dump()));
    const double v = it->get<double>();
    if (!in_range(v))
      throw FormatError(fmt::format("{}: '{}' must be {}, got {}", source, key, range, v));
    // transformers' GenerationConfig.to_diff_dict() drops a value equal to its own default, so
    // vLLM never sees it.
    if (v == transformers_default) {
      d.notes.push_back(fmt::format(
          "{} {} not applied: transformers' default, which vLLM's to_diff_dict drops", key, v));
      return std::nullopt;
    }
    return v;
  };
  constexpr double kNoDefault = NAN;  // never equal: min_p and max_new_tokens default to None
  if (auto v = number(
          "temperature", 1.0, [](double x) { return x >= 0; }, ">= 0"))
    d.temperature = static_cast<float>(*v);
  if (auto v = number(
          "top_p", 1.0, [](double x) { return x > 0 && x <= 1; }, "in (0, 1]"))
    d.top_p = static_cast<float>(*v);
  if (auto v = number(
          "min_p", kNoDefault, [](double x) { return x >= 0 && x <= 1; }, "in [0, 1]"))
    d.min_p = static_cast<float>(*v);
  if (auto v = number(
          "repetition_penalty", 1.0, [](double x) { return x > 0; }, "> 0"))
    d.repetition_penalty = static_cast<float>(*v);
  auto integer = [&](const char* key) {
    auto it = config.find(key);
    if (it != config.end() && !it->is_null() && !it->is_number_integer())
      throw FormatError(
          fmt::format("{}: '{}' must be an integer, got {}", source, key, it->dump()));
  };
  integer("top_k");
  integer("max_new_tokens");
  if (auto v = number(
          "top_k", 50, [](double x) { return x >= -1 && x <= INT32_MAX; },
          "-1 or 0 (off) or a count >= 1"))
    d.top_k = *v <= 0 ? 0 : static_cast<int>(*v);  // vLLM: -1 (and 0) mean off
  if (auto v = number(
          "max_new_tokens", kNoDefault, [](double x) { return x >= 1; }, ">= 1")) {
    d.max_tokens = static_cast<int64_t>(*v);
    // vLLM: an explicit --generation-config FOLDER also caps requests (override_max_tokens).
    if (mode != "auto") d.max_tokens_cap = d.max_tokens;
  }
  if (config.contains("do_sample") && config["do_sample"].is_boolean() &&
      !config["do_sample"].get<bool>() && (d.temperature || d.top_p || d.top_k || d.min_p))
    d.notes.push_back(
        "do_sample false not applied: vLLM ignores do_sample and samples with the values above");
  return d;
}

}  // namespace refit
