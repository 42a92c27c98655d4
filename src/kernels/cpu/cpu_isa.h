// Which SIMD instruction set the CPU kernels run with.
//
// Kernels are compiled once per Highway target (scalar emulation, SSSE3, SSE4, AVX2,
// AVX-512) and the best one this CPU supports is chosen at run time. The environment
// variable REFIT_CPU_ISA (scalar|ssse3|sse4|avx2|avx3) caps that choice at a lower ISA,
// as PyTorch's ATEN_CPU_CAPABILITY does: for reproducing a result seen on an older
// machine, or for testing every code path on one machine.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace refit::cpu {

// Applies REFIT_CPU_ISA the first time it is called (every kernel entry calls it).
// An unknown value throws naming the accepted ones.
void init_cpu_isa();

// The Highway target the kernels dispatch to now, e.g. "AVX3", "AVX2", "EMU128".
std::string cpu_isa_name();

// Whether the cap allows AVX-512 (the chosen target is one of Highway's AVX3 targets).
// Hand-written AVX-512 kernels (matmul_int8_dot, matmul_fp8_bf16dot) check it beside the
// CPU's own feature bits, so REFIT_CPU_ISA turns them off like the Highway ones.
bool avx512_allowed();
// Whether the cap allows AVX2 (the chosen target is AVX2 or one of the AVX3 ones); for the
// hand-written AVX2 kernels (matmul_int8_dot_avx2), as avx512_allowed is for AVX-512 ones.
bool avx2_allowed();

// The names set_cpu_isa accepts that this CPU can run, best first ("avx3", ..., "scalar").
std::vector<std::string> cpu_isas_available();

// Caps the ISA at `name` (one of cpu_isas_available(), or any known name: a cap above
// what the CPU has changes nothing). Must not race with running kernels; tests use it to
// run each kernel under every ISA.
void set_cpu_isa(std::string_view name);

}  // namespace refit::cpu
