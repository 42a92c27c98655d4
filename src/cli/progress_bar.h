// A load progress bar on stderr, shown only on a terminal and for large models.
#pragma once

#include <functional>
#include <string>

namespace refit::cli {

// Returns a (done, total) callback drawing the bar, or an empty function when stderr is
// not a terminal or `bytes` is small.
std::function<void(size_t, size_t)> progress_bar(const std::string& label, size_t bytes);

}  // namespace refit::cli
