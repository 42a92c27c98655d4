#include "cli/progress_bar.h"

#include <fmt/format.h>
#include <unistd.h>

#include <memory>

namespace refit::cli {

std::function<void(size_t, size_t)> progress_bar(const std::string& label, size_t bytes) {
  if (!isatty(STDERR_FILENO) || bytes < (64u << 20)) return {};
  auto last = std::make_shared<int>(-1);
  return [label, last](size_t done, size_t total) {
    const int percent = total ? static_cast<int>(100.0 * done / total) : 100;
    if (percent == *last) return;
    *last = percent;
    const int filled = percent / 4;
    fmt::print(stderr, "\rloading {} [{}{}] {:3d}%", label, std::string(filled, '#'),
               std::string(25 - filled, ' '), percent);
    if (percent == 100) fmt::print(stderr, "\n");
  };
}

}  // namespace refit::cli
