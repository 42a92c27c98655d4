#include "models/hf_rope_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"

namespace refit {
namespace {

// Keys of a rope dict refit reads (any rope type); others are reported as unrecognised.
constexpr const char* kRopeKeys[] = {
    "rope_type",
    "type",
    "rope_theta",
    "factor",
    "original_max_position_embeddings",
    "low_freq_factor",
    "high_freq_factor",
    "short_factor",
    "long_factor",
    "attention_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "truncate",
    "partial_rotary_factor",
};

float number(const nlohmann::json& d, const char* key, float fallback, const std::string& source,
             const std::string& field) {
  if (!d.contains(key) || d[key].is_null()) return fallback;
  if (!d[key].is_number())
    throw FormatError(fmt::format("{}: {}.{} must be a number", source, field, key));
  return d[key].get<float>();
}

// transformers' get_mscale: 0.1 m ln(s) + 1 for a scale s > 1, else 1.
double yarn_mscale(double scale, double m) {
  return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

struct Rope {
  float theta;
  RopeScaling scaling;
  int64_t context = 0;  // the served context the scaling asks for (dynamic), else 0
  bool operator==(const Rope&) const = default;
};

// One rope dict (`field` names it in errors: "rope_scaling", "rope_parameters.full_attention").
Rope read_dict(const nlohmann::json& rs, const nlohmann::json& j, const ModelConfig& c, float theta,
               const std::string& source, const std::string& field,
               std::vector<std::string>& unrecognised) {
  Rope r{theta, {}};
  for (const auto& [k, v] : rs.items()) {
    bool known = false;
    for (const char* key : kRopeKeys) known = known || k == key;
    if (!known) unrecognised.push_back(field + "." + k);
  }
  if (rs.contains("rope_theta") && rs["rope_theta"].is_number())
    r.theta = rs["rope_theta"].get<float>();
  const std::string type = rs.value("rope_type", rs.value("type", std::string()));
  RopeScaling& s = r.scaling;
  auto need_factor = [&] {
    if (!rs.contains("factor") || !rs["factor"].is_number())
      throw FormatError(
          fmt::format("{}: {} type '{}' needs a numeric factor", source, field, type));
    return rs["factor"].get<float>();
  };
  if (type == "llama3") {
    s.kind = RopeScalingKind::llama3;
    s.factor = rs.value("factor", 8.0f);
    s.low_freq_factor = rs.value("low_freq_factor", 1.0f);
    s.high_freq_factor = rs.value("high_freq_factor", 4.0f);
    s.original_max_position = rs.value("original_max_position_embeddings", int64_t{8192});
  } else if (type == "linear") {
    s.kind = RopeScalingKind::linear;
    s.factor = need_factor();
  } else if (type == "dynamic") {
    // transformers' _compute_dynamic_ntk_parameters recomputes the base from the current
    // sequence length L once L exceeds max_position_embeddings (below it: unscaled).
    // A served engine cannot re-rotate cached keys per length, so refit does what vLLM's
    // DynamicNTKScalingRotaryEmbedding does: the base fixed for L = max_position_embeddings
    // * factor, which is also the context served (vLLM's max_model_len rule).
    s.kind = RopeScalingKind::dynamic;
    s.factor = need_factor();
    s.original_max_position = c.max_seq_len;
    r.context = static_cast<int64_t>(std::llround(static_cast<double>(c.max_seq_len) * s.factor));
  } else if (type == "longrope" || type == "su") {
    const int64_t original = j.value("original_max_position_embeddings",
                                     rs.value("original_max_position_embeddings", int64_t{0}));
    if (original <= 0)
      throw FormatError(fmt::format("{}: longrope needs original_max_position_embeddings", source));
    for (const char* list : {"short_factor", "long_factor"})
      if (!rs.contains(list) || !rs[list].is_array())
        throw FormatError(fmt::format("{}: {}.{} must be a list of numbers", source, field, list));
    s.kind = RopeScalingKind::longrope;
    s.original_max_position = original;
    s.short_factors = rs["short_factor"].get<std::vector<float>>();
    s.long_factors = rs["long_factor"].get<std::vector<float>>();
    // transformers' _compute_longrope_parameters: from the trained context, whatever the
    // served one.
    const double scale = static_cast<double>(c.max_seq_len) / static_cast<double>(original);
    s.attention_factor =
        rs.contains("attention_factor") && rs["attention_factor"].is_number()
            ? rs["attention_factor"].get<float>()
        : scale <= 1.0 ? 1.0f
                       : static_cast<float>(std::sqrt(1 + std::log(scale) / std::log(original)));
  } else if (type == "yarn") {
    // transformers >= 4.56 _compute_yarn_parameters (vLLM, llama.cpp alike): an explicit
    // factor as given, else max_position / original; the correction range from the original
    // context, rounded outwards unless truncate is false (gpt-oss; vLLM #28244).
    s.kind = RopeScalingKind::yarn;
    const int64_t original = rs.value("original_max_position_embeddings",
                                      j.value("original_max_position_embeddings", c.max_seq_len));
    s.factor = rs.contains("factor") && rs["factor"].is_number()
                   ? rs["factor"].get<float>()
                   : static_cast<float>(c.max_seq_len) / static_cast<float>(original);
    s.original_max_position = original;
    // The attention factor on cos/sin: given, or the mscale / mscale_all_dim ratio when both
    // are set and non-zero (DeepSeek), else 0.1 ln(factor) + 1. As transformers: a config
    // with mscale = mscale_all_dim = 1 gets ratio 1, not the default.
    const float mscale = number(rs, "mscale", 0.0f, source, field);
    const float mscale_all_dim = number(rs, "mscale_all_dim", 0.0f, source, field);
    if (rs.contains("attention_factor") && rs["attention_factor"].is_number())
      s.attention_factor = rs["attention_factor"].get<float>();
    else if (mscale != 0 && mscale_all_dim != 0)
      s.attention_factor =
          static_cast<float>(yarn_mscale(s.factor, mscale) / yarn_mscale(s.factor, mscale_all_dim));
    else
      s.attention_factor = static_cast<float>(yarn_mscale(s.factor, 1.0));
    // transformers: `beta_fast or 32`, so 0 or null take the default too.
    const float beta_fast = number(rs, "beta_fast", 0.0f, source, field);
    const float beta_slow = number(rs, "beta_slow", 0.0f, source, field);
    if (beta_fast != 0) s.beta_fast = beta_fast;
    if (beta_slow != 0) s.beta_slow = beta_slow;
    if (rs.contains("truncate") && !rs["truncate"].is_null()) {
      if (!rs["truncate"].is_boolean())
        throw FormatError(fmt::format("{}: {}.truncate must be true or false", source, field));
      s.truncate = rs["truncate"].get<bool>();
    }
  } else if (!type.empty() && type != "default") {
    throw FormatError(
        fmt::format("{}: {} type '{}' is not supported (refit runs default, linear, "
                    "dynamic, llama3, longrope, yarn)",
                    source, field, type));
  }
  return r;
}

bool is_layer_type_dict(const nlohmann::json& rp) {
  return rp.contains("full_attention") || rp.contains("sliding_attention");
}

}  // namespace

double hf_partial_rotary_factor(const nlohmann::json& j) {
  auto from = [](const nlohmann::json& d) -> std::optional<double> {
    if (d.is_object() && d.contains("partial_rotary_factor") &&
        d["partial_rotary_factor"].is_number())
      return d["partial_rotary_factor"].get<double>();
    return std::nullopt;
  };
  if (auto f = from(j)) return *f;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const nlohmann::json& rp = j["rope_parameters"];
    if (auto f = from(rp)) return *f;
    if (rp.contains("full_attention"))
      if (auto f = from(rp["full_attention"])) return *f;
  }
  return 1.0;
}

void read_hf_rope(const nlohmann::json& j, ModelConfig& c, const std::string& source,
                  bool per_layer_types) {
  // v4 writes rope_scaling (theta beside it); v5 rope_parameters (theta inside). A config
  // with both keeps rope_scaling, as transformers' conversion does.
  const bool v4 = j.contains("rope_scaling") && j["rope_scaling"].is_object();
  const char* key = v4 ? "rope_scaling" : "rope_parameters";
  if (!j.contains(key) || !j[key].is_object()) return;
  const nlohmann::json& rp = j[key];
  auto apply = [&](const Rope& r) {
    c.rope_theta = r.theta;
    c.rope_scaling = r.scaling;
    if (r.context > 0) c.max_seq_len = r.context;
  };
  if (v4 || !is_layer_type_dict(rp)) {
    apply(read_dict(rp, j, c, c.rope_theta, source, key, c.unrecognised_fields));
    return;
  }
  // v5 per layer type: {"full_attention": {...}, "sliding_attention": {...}}.
  Rope full{c.rope_theta, {}}, sliding{c.rope_theta, {}};
  bool has_sliding = false;
  for (const auto& [type, dict] : rp.items()) {
    const std::string field = std::string(key) + "." + type;
    if (!dict.is_object())
      throw FormatError(fmt::format("{}: {} must be an object", source, field));
    if (type == "full_attention") {
      full = read_dict(dict, j, c, c.rope_theta, source, field, c.unrecognised_fields);
    } else if (type == "sliding_attention") {
      sliding = read_dict(dict, j, c, c.rope_theta, source, field, c.unrecognised_fields);
      has_sliding = true;
    } else {
      throw FormatError(
          fmt::format("{}: {} is not a layer type refit knows "
                      "(full_attention, sliding_attention)",
                      source, field));
    }
  }
  if (has_sliding && !(sliding == full) && !per_layer_types)
    throw FormatError(fmt::format(
        "{}: {} gives sliding and full attention layers different rope settings; {} has one "
        "rotary embedding for every layer (as in transformers)",
        source, key, architecture_name(c.arch)));
  apply(full);
  if (has_sliding && per_layer_types) {
    c.sliding_rope_given = true;
    c.sliding_rope_theta = sliding.theta;
    c.sliding_rope_scaling = sliding.scaling;
  }
}

}  // namespace refit
