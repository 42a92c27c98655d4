// Run-time ISA selection for the Highway kernels (see cpu_isa.h).
// Highway needs foreach_target.h right after HWY_TARGET_INCLUDE: not reordered.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/cpu_isa.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {
// Which target the dispatch table picked: compiled once per target like every kernel.
int64_t CompiledTarget() { return HWY_TARGET; }
}  // namespace refit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/cpu_isa.h"

#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace refit::cpu {
HWY_EXPORT(CompiledTarget);

namespace {

struct IsaName {
  const char* name;
  int64_t target;  // Highway target bit; lower bits are better targets
};

// Best first. "scalar" is Highway's portable fallback (EMU128, or SCALAR with one lane
// on compilers where EMU128 is broken, e.g. GCC < 12.3), always available.
constexpr IsaName kIsas[] = {
    {"avx3", HWY_AVX3},
    {"avx2", HWY_AVX2},
    {"sse4", HWY_SSE4},
    {"ssse3", HWY_SSSE3},
    {"scalar", HWY_BASELINE_SCALAR},
};

std::once_flag g_env_once;
int64_t g_disabled_targets = 0;  // the cap in force, as a DisableTargets mask

const IsaName* find_isa(std::string_view name) {
  if (name == "avx512") name = "avx3";
  for (const auto& isa : kIsas)
    if (name == isa.name) return &isa;
  return nullptr;
}

std::string known_names() {
  std::string s;
  for (const auto& isa : kIsas) {
    if (!s.empty()) s += '|';
    s += isa.name;  // appended, not `a + b`: GCC 12 warns (-Wrestrict) on that temporary
  }
  return s;
}

void apply_cap(const IsaName& isa) {
  // Disable every target better than the cap (all lower bits). DisableTargets resets
  // the chosen target, so the next dispatch re-selects among what is left.
  g_disabled_targets = isa.target - 1;
  hwy::DisableTargets(g_disabled_targets);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

}  // namespace

void init_cpu_isa() {
  std::call_once(g_env_once, [] {
    const char* env = std::getenv("REFIT_CPU_ISA");
    if (env == nullptr || *env == '\0') return;
    const IsaName* isa = find_isa(env);
    if (isa == nullptr)
      fail("REFIT_CPU_ISA='{}' is not an ISA name (expected {})", env, known_names());
    apply_cap(*isa);
  });
}

std::string cpu_isa_name() {
  init_cpu_isa();
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(CompiledTarget)());
}

bool avx512_allowed() { return cpu_isa_name().rfind("AVX3", 0) == 0; }

bool avx2_allowed() { return avx512_allowed() || cpu_isa_name() == "AVX2"; }

std::vector<std::string> cpu_isas_available() {
  init_cpu_isa();
  // SupportedTargets() honours the cap in force, so ask with the cap lifted, then put
  // the cap back so dispatch is unchanged by this query.
  hwy::DisableTargets(0);
  int64_t runnable = hwy::SupportedTargets() & HWY_TARGETS;
  hwy::DisableTargets(g_disabled_targets);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  std::vector<std::string> out;
  for (const auto& isa : kIsas)
    if (runnable & isa.target) out.push_back(isa.name);
  return out;
}

void set_cpu_isa(std::string_view name) {
  init_cpu_isa();
  const IsaName* isa = find_isa(name);
  if (isa == nullptr) fail("unknown CPU ISA '{}' (expected {})", name, known_names());
  apply_cap(*isa);
}

}  // namespace refit::cpu
#endif  // HWY_ONCE
