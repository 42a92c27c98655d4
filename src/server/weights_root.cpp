#include "server/weights_root.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "server/api_types.h"

namespace refit {

namespace fs = std::filesystem;

WeightsRoot::WeightsRoot(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec || !fs::is_directory(root, ec))
    fail("--weights-root {}: not an existing folder{}", dir, ec ? ": " + ec.message() : "");
  root_ = root;
}

std::string WeightsRoot::resolve(const std::string& path, const std::string& field) const {
  if (path.find('\0') != std::string::npos)
    throw HttpError{
        400, fmt::format("'{}' holds a NUL byte", field), "invalid_request_error", field, {}};
  if (!restricted()) return path;
  const fs::path given(path);
  std::error_code ec;
  // weakly_canonical follows every symlink of the part that exists and folds ".." in the
  // rest, so "DIR/missing/../../etc" and "DIR/link-to-/etc" both come out outside DIR.
  const fs::path resolved = fs::weakly_canonical(given.is_absolute() ? given : root_ / given, ec);
  if (!ec) {
    const auto inside = std::mismatch(root_.begin(), root_.end(), resolved.begin(), resolved.end());
    if (inside.first == root_.end()) return resolved.string();
  }
  throw HttpError{403,
                  fmt::format("'{}' is not inside the folder this server loads weights from "
                              "(--weights-root); give a checkpoint path inside it",
                              field),
                  "permission_error", field, "path_not_allowed"};
}

}  // namespace refit
