// What one weight update wrote, as its commit reports it (the HTTP routes add it to their
// responses, the Python module returns it): the checkpoint tensors written, the bytes they
// carried, the parameters they touched, the tensors set aside because no parameter takes
// them (with UpdateOptions::ignore_unknown_tensors), whether their values were checked to
// be finite, and the time spent validating and writing.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace refit {

struct UpdateReport {
  std::vector<std::string> tensors;  // checkpoint names written, in staging order
  size_t bytes = 0;                  // of those tensors as sent (their own dtypes)
  size_t parameters = 0;             // distinct parameters written
  std::vector<std::string> ignored;  // tensors no parameter takes, left out
  bool checked_finite = false;
  double validate_seconds = 0.0;  // staging: names, shapes, dtypes, values
  double commit_seconds = 0.0;    // writing into the parameters (0 until committed)
};

// "and N more" lists for messages: the first `shown` names, then how many were left out.
std::string name_list(const std::vector<std::string>& names, size_t shown = 8);

}  // namespace refit
