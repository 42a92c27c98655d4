#include "formats/json_depth.h"

#include <fmt/format.h>

#include "core/error.h"

namespace refit {

nlohmann::json parse_json_limited(const char* begin, const char* end, const std::string& source,
                                  const nlohmann::json::parser_callback_t& on_event) {
  const auto limited = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth > kMaxJsonFileDepth && (event == nlohmann::json::parse_event_t::object_start ||
                                      event == nlohmann::json::parse_event_t::array_start))
      throw FormatError(
          fmt::format("{}: JSON nests deeper than {} levels", source, kMaxJsonFileDepth));
    return on_event ? on_event(depth, event, parsed) : true;
  };
  return nlohmann::json::parse(begin, end, limited);
}

}  // namespace refit
