#include "server/update_report_json.h"

#include <fmt/format.h>

#include "server/api_types.h"

namespace refit {

using nlohmann::json;

namespace {

std::optional<bool> bool_field(const json& body, const char* name) {
  if (!body.contains(name) || body[name].is_null()) return std::nullopt;
  if (!body[name].is_boolean())
    throw HttpError{400,
                    fmt::format("field '{}' must be true or false, not {}", name,
                                body[name].dump().substr(0, 80)),
                    "invalid_request_error",
                    name,
                    {}};
  return body[name].get<bool>();
}

constexpr size_t kNamesShownByDefault = 32;

}  // namespace

UpdateRequestOptions parse_update_options(const json& body, bool check_finite_default) {
  UpdateRequestOptions r;
  r.options.check_finite = bool_field(body, "check_finite").value_or(check_finite_default);
  r.options.ignore_unknown_tensors = bool_field(body, "ignore_unknown_tensors").value_or(false);
  r.report_names = bool_field(body, "report_tensor_names");
  return r;
}

void add_update_report(json& reply, const UpdateReport& report, std::optional<bool> report_names) {
  json r{{"tensors_written", report.tensors.size()}, {"bytes", report.bytes},
         {"parameters_touched", report.parameters},  {"ignored", report.ignored},
         {"check_finite", report.checked_finite},    {"validate_seconds", report.validate_seconds},
         {"commit_seconds", report.commit_seconds}};
  if (report_names.value_or(report.tensors.size() <= kNamesShownByDefault))
    r["tensor_names"] = report.tensors;
  reply["ignored"] = report.ignored;
  reply["report"] = std::move(r);
}

}  // namespace refit
