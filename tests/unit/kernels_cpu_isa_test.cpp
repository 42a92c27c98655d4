// Run-time ISA selection: every ISA this CPU has can be forced and is the one reported,
// a cap above the CPU changes nothing, and unknown names are refused with the list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/error.h"
#include "kernels/cpu/cpu_isa.h"

namespace refit {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

TEST(KernelsCpuIsa, each_available_isa_can_be_forced_and_is_reported) {
  const auto isas = cpu::cpu_isas_available();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), "scalar");  // the portable fallback is always there
  for (const std::string& isa : isas) {
    cpu::set_cpu_isa(isa);
    const std::string name = lower(cpu::cpu_isa_name());
    if (isa == "scalar")
      EXPECT_TRUE(name == "scalar" || name == "emu128") << name;
    else
      EXPECT_EQ(name, isa);
  }
  cpu::set_cpu_isa(isas.front());
  EXPECT_EQ(lower(cpu::cpu_isa_name()),
            isas.front() == "scalar" ? lower(cpu::cpu_isa_name()) : isas.front());
  // Asking for the best name there is never picks something this CPU lacks.
  cpu::set_cpu_isa("avx3");
  EXPECT_EQ(lower(cpu::cpu_isa_name()),
            isas.front() == "scalar" ? lower(cpu::cpu_isa_name()) : isas.front());
  const char* env = std::getenv("REFIT_CPU_ISA");
  cpu::set_cpu_isa(env && *env ? env : isas.front());
}

TEST(KernelsCpuIsa, unknown_names_are_refused_listing_the_known_ones) {
  try {
    cpu::set_cpu_isa("neon9");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("avx2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("scalar"), std::string::npos) << e.what();
  }
}

// REFIT_CPU_ISA is read once per process, so it is checked through the CLI: a valid cap
// runs, a bogus one fails instead of being ignored.
TEST(KernelsCpuIsa, env_var_is_honoured_or_refused_by_a_new_process) {
  const std::string cmd =
      std::string("REFIT_CPU_ISA=scalar ") + REFIT_BINARY + " kernels > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  const std::string bad =
      std::string("REFIT_CPU_ISA=bogus ") + REFIT_BINARY + " kernels > /dev/null 2>&1";
  EXPECT_NE(std::system(bad.c_str()), 0);
}

}  // namespace
}  // namespace refit
