// CPU features that __builtin_cpu_supports cannot name on every compiler refit builds with
// (clang 14 has no "f16c" there), read from CPUID and XGETBV directly.
#pragma once

namespace refit {

// AVX and F16C usable: the CPU has both and the OS saves the YMM registers. False off x86.
bool cpu_has_avx_f16c();

}  // namespace refit
