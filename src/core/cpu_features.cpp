#include "core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace refit {

bool cpu_has_avx_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const bool osxsave = ecx & (1u << 27), avx = ecx & (1u << 28), f16c = ecx & (1u << 29);
    if (!osxsave || !avx || !f16c) return false;
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0x6u) == 0x6u;  // XMM and YMM state enabled by the OS
  }();
  return usable;
#else
  return false;
#endif
}

bool cpu_converts_f16_at_fma_rate() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool fast = [] {
    if (!cpu_has_avx_f16c()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // AuthenticAMD
    if (!amd || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const unsigned base = (eax >> 8) & 0xf, extended = (eax >> 20) & 0xff;
    const unsigned family = base == 0xf ? base + extended : base;
    return family >= 0x19;
  }();
  return fast;
#else
  return false;
#endif
}

}  // namespace refit
