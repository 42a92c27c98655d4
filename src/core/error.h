// Errors thrown inside the library. Every message carries the context a user needs
// (file, tensor name, expected versus actual); edges convert them (CLI exit code,
// HTTP JSON error, Python exception).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace refit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Malformed or lying input file: the message names the file and what was wrong.
class FormatError : public Error {
 public:
  using Error::Error;
};

// No kernel accepts the argument tensors, or the tensors live on different devices.
class DispatchError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Internal invariant (never user input): a bug in refit if it fires.
#define REFIT_ASSERT(cond)                                                                        \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      throw ::refit::Error(fmt::format("internal error: {} ({}:{})", #cond, __FILE__, __LINE__)); \
  } while (0)

}  // namespace refit
