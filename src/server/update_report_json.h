// The validation options every weight-update route reads from its request body, and the
// report every one adds to its reply (beside SGLang's success / message / weight_version,
// which stay as they were). docs/weight-lifecycle.md, "What an update checks".
//
//   check_finite            bool, default true (false with `refit serve --no-check-finite`):
//                           refuse NaN and infinite values
//   ignore_unknown_tensors  bool, default false: tensors no parameter takes are refused;
//                           true leaves them out and lists them in "ignored"
//   report_tensor_names     bool: list every tensor written in report.tensor_names
//                           (default: when at most 32 were)
//
// Reply fields added: "ignored": [names], and "report": {tensors_written, tensor_names?,
// bytes, parameters_touched, ignored, check_finite, validate_seconds, commit_seconds}.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>

#include "weights/update_report.h"
#include "weights/weight_update.h"

namespace refit {

inline constexpr std::initializer_list<const char*> kUpdateOptionFields = {
    "check_finite", "ignore_unknown_tensors", "report_tensor_names"};

struct UpdateRequestOptions {
  UpdateOptions options;
  std::optional<bool> report_names;
};

// Throws HttpError 400 naming a field of the wrong type.
UpdateRequestOptions parse_update_options(const nlohmann::json& body, bool check_finite_default);

// Adds "ignored" and "report" to `reply`.
void add_update_report(nlohmann::json& reply, const UpdateReport& report,
                       std::optional<bool> report_names);

}  // namespace refit
