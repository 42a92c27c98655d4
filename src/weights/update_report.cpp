#include "weights/update_report.h"

#include <fmt/format.h>

namespace refit {

std::string name_list(const std::vector<std::string>& names, size_t shown) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < shown; ++i)
    out += fmt::format("{}'{}'", i == 0 ? "" : ", ", names[i]);
  if (names.size() > shown) out += fmt::format(" and {} more", names.size() - shown);
  return out;
}

}  // namespace refit
