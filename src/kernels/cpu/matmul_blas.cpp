// matmul with f32 weights through OpenBLAS's sgemm.
//
// OpenBLAS is pinned to one thread and N is split across refit's own pool instead, so the
// process has one set of worker threads (two pools fighting over the same cores make
// both slow). Each thread multiplies all M rows of x by its own slice of weight rows:
// out[:, n0:n1] = x · w[n0:n1, :]^T, which in row-major sgemm terms is NoTrans x Trans.
//
// Not batch-invariant: OpenBLAS may pick a different kernel (and summation order) for
// another M. The Highway kernel (matmul_cpu.cpp) is, for f16/bf16 weights.
#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"

// Present in OpenBLAS builds with DYNAMIC_ARCH (Debian's); weak so other BLAS builds link.
extern "C" {
__attribute__((weak)) void gotoblas_dynamic_init(void);
__attribute__((weak)) void gotoblas_dynamic_quit(void);
}

namespace refit::cpu {
namespace {

// OpenBLAS before 0.3.25 falls back to its SSE3 "Prescott" kernels on x86 CPUs whose
// model number it does not know (OpenMathLib/OpenBLAS#4267), e.g. Sapphire Rapids as a
// VM presents it: sgemm then runs 3-4x slower. When that happened, the user did not
// choose a core (OPENBLAS_CORETYPE), and this CPU has AVX-512 or AVX2, re-run OpenBLAS's
// own core selection with the matching core name. Done once, before our first BLAS call.
void fix_openblas_core_detection() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return;
  const char* core = openblas_get_corename();
  if (core == nullptr || strcasecmp(core, "prescott") != 0) return;
  const char* better = nullptr;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    better = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    better = "Haswell";
#endif
  if (better == nullptr) return;
  setenv("OPENBLAS_CORETYPE", better, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
}

}  // namespace

void prepare_openblas() {
  static std::once_flag once;
  std::call_once(once, [] {
    fix_openblas_core_detection();
    openblas_set_num_threads(1);
  });
}

void matmul_f32_blas(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  prepare_openblas();

  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  if (M == 0 || N == 0) return;
  const float* xp = x.data<const float>();
  const float* wp = w.data<const float>();
  const float* bp = bias.defined() ? bias.data<const float>() : nullptr;
  float* op = out.data<float>();
  // BLAS wants a leading dimension >= the row length even when there is one row, whose
  // stride a view may report as anything.
  const int64_t ldx = M == 1 ? std::max<int64_t>(x.stride(0), K) : x.stride(0);
  const int64_t ldo = M == 1 ? std::max<int64_t>(out.stride(0), N) : out.stride(0);
  const int64_t ldw = N == 1 ? std::max<int64_t>(w.stride(0), K) : w.stride(0);
  // One sgemm per slice of kSlice weight rows (a multiple of 64, which keeps sgemm's panels
  // full). The slices are fixed, not the pool's ranges: those are cut by timing, and
  // OpenBLAS may pick another kernel (and summation order) for another N, so a result
  // would then change from run to run. With fixed slices it is the same every run.
  constexpr int64_t kSlice = 512;
  auto slice = [&](int64_t n0, int64_t n1) {
    float beta = 0.0f;
    if (bp != nullptr) {
      for (int64_t m = 0; m < M; ++m) std::copy(bp + n0, bp + n1, op + m * ldo + n0);
      beta = 1.0f;
    }
    if (K == 0) {
      if (bp == nullptr)
        for (int64_t m = 0; m < M; ++m) std::fill(op + m * ldo + n0, op + m * ldo + n1, 0.0f);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(M),
                static_cast<blasint>(n1 - n0), static_cast<blasint>(K), 1.0f, xp,
                static_cast<blasint>(ldx), wp + n0 * ldw, static_cast<blasint>(ldw), beta, op + n0,
                static_cast<blasint>(ldo));
  };
  parallel_for((N + kSlice - 1) / kSlice, [&](int64_t s0, int64_t s1, int) {
    for (int64_t s = s0; s < s1; ++s) slice(s * kSlice, std::min(N, (s + 1) * kSlice));
  });
}

}  // namespace refit::cpu
