// CPU features that __builtin_cpu_supports cannot name on every compiler refit builds with
// (clang 14 has no "f16c" there), read from CPUID and XGETBV directly.
#pragma once

namespace refit {

// AVX and F16C usable: the CPU has both and the OS saves the YMM registers. False off x86.
bool cpu_has_avx_f16c();

// Whether widening f16 to f32 (vcvtph2ps) runs beside the FMAs at full rate, so a matmul
// tile may widen f16 weights as it loads them: AMD Zen 3 and later (family 19h up), where
// a 4x3 tile with f16 weights ran as fast as with f32 ones. Zen 2 lost ~28% doing so, and
// on Intel cores the conversion takes a slot on an FMA port; false there and off x86.
bool cpu_converts_f16_at_fma_rate();

}  // namespace refit
