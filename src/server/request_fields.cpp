#include "server/request_fields.h"

#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

namespace refit {

namespace {
std::mutex seen_mutex;
std::set<std::pair<std::string, std::string>> seen;
}  // namespace

void ignore_unknown_field(const std::string& endpoint, const std::string& field) {
  {
    std::lock_guard lock(seen_mutex);
    if (!seen.emplace(endpoint, field).second) return;
  }
  std::fputs(fmt::format("refit serve: {}: ignoring unknown request field '{}' (logged once)\n",
                         endpoint, field)
                 .c_str(),
             stderr);
}

void ignore_unknown_fields(const nlohmann::json& body, std::initializer_list<const char*> known,
                           const std::string& endpoint) {
  if (!body.is_object()) return;
  for (const auto& [key, value] : body.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) ignore_unknown_field(endpoint, key);
  }
}

size_t ignored_field_count() {
  std::lock_guard lock(seen_mutex);
  return seen.size();
}

}  // namespace refit
