// --weights-root DIR: the one folder whose checkpoints the update routes may open
// (/update_weights_from_disk, vLLM's /update_weights). A path a request names is resolved
// (relative paths from DIR, symlinks followed, "." and ".." folded) and must then lie in DIR;
// otherwise the request is refused with the same words whether the path exists or not, so
// the server tells nobody what lies outside DIR. Files inside a checkpoint folder under DIR
// are the operator's (a Hugging Face cache links its snapshots to blobs beside them).
#pragma once

#include <filesystem>
#include <string>

namespace refit {

class WeightsRoot {
 public:
  // No root: every path is taken as given.
  WeightsRoot() = default;
  // Throws Error when `dir` is not an existing folder; empty `dir`: no root.
  explicit WeightsRoot(const std::string& dir);

  bool restricted() const { return !root_.empty(); }
  const std::filesystem::path& root() const { return root_; }

  // The path to open for the request field `field` = `path`: resolved inside the root, or
  // `path` itself without one. HttpError 403 naming the field when it lies outside; 400
  // when it holds a NUL byte (the system would open a shorter path than the one checked).
  std::string resolve(const std::string& path, const std::string& field) const;

 private:
  std::filesystem::path root_;  // canonical
};

}  // namespace refit
