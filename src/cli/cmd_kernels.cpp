// `refit kernels`: print the dispatch table (every op, every kernel, what it accepts).
#include <fmt/format.h>

#include "cli/command.h"
#include "kernels/registry.h"

namespace refit::cli {
namespace {
CommandRegistrar registrar{{"kernels", "Print the kernel dispatch table", [](CLI::App& sub) {
                              return std::function<int()>([] {
                                fmt::print("{}", KernelRegistry::global().table());
                                return 0;
                              });
                            }}};
}  // namespace
}  // namespace refit::cli
