// `refit kernels`: print the dispatch table (every op, every kernel, what it accepts)
// and the CPU instruction set the SIMD kernels run with.
#include <fmt/format.h>

#include "cli/command.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/registry.h"

namespace refit::cli {
namespace {
CommandRegistrar registrar{{"kernels", "Print the kernel dispatch table", [](CLI::App& sub) {
                              return std::function<int()>([] {
                                const std::string table = KernelRegistry::global().table();
                                fmt::print("cpu isa: {} (REFIT_CPU_ISA forces a lower one)\n\n{}",
                                           cpu::cpu_isa_name(), table);
                                return 0;
                              });
                            }}};
}  // namespace
}  // namespace refit::cli
