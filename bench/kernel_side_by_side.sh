#!/usr/bin/env bash
# Decode's matrix-vector product beside ggml's, in one run: ggml's own perf case for it
# (test-backend-ops perf, MUL_MAT m = 4096, n = 1, k = 14336: a Llama-3-8B FFN matrix, 2
# threads) and refit's quant_matmul_bench on the same shape, then ggml again (the second ggml
# run shows how far the machine drifted). Both re-read the same weights every call, as
# decode reads them once per token; both include quantizing the activations (ggml's f32 x
# Q8_0/MXFP4 product quantizes them to Q8_0, as refit's -w8a8 kernels do).
#
#   bench/kernel_side_by_side.sh TEST_BACKEND_OPS
#
# TEST_BACKEND_OPS is a test-backend-ops binary you built yourself from ggml or llama.cpp
# (refit neither ships nor builds it; MXFP4 needs ggml from August 2025 or later). Settings:
# QBENCH (default build/bench/quant_matmul_bench). Prints GB/s of weight bytes for each, and
# the rate of a plain read of the same bytes (the ceiling for both).
set -euo pipefail
if [[ $# -ne 1 ]]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
TBO=$1
QBENCH=${QBENCH:-build/bench/quant_matmul_bench}
for exe in "$TBO" "$QBENCH"; do
  [[ -x $exe ]] || { echo "kernel_side_by_side: $exe is not an executable" >&2; exit 2; }
done
M=4096 K=14336
echo "shape: weights ${M} x ${K}, one activation row, $(nproc) CPUs; $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)"

# ggml: microseconds per run -> GB/s of weight bytes (block bytes per 32 values).
ggml_gbs() {
  local type=$1 bytes_per_32=$2 us
  us=$("$TBO" perf -o MUL_MAT -b CPU -p "type_a=$type,type_b=f32,m=$M,n=1,k=$K" 2>&1 |
    sed 's/\x1b\[[0-9;]*m//g' | grep -o '[0-9.]* us/run' | cut -d' ' -f1)
  [[ -n $us ]] || { echo "n/a"; return; }
  awk -v us="$us" -v b="$bytes_per_32" -v m=$M -v k=$K 'BEGIN { printf "%.1f", m * k / 32 * b / (us * 1e3) }'
}
# refit: the wGB/s counter of one quant_matmul_bench row (weights sized to one copy, re-read).
refit_gbs() {
  REFIT_BENCH_K=$K REFIT_BENCH_N=$M REFIT_BENCH_MIB=1 "$QBENCH" --benchmark_filter="BM_decode/$1/" 2>&1 |
    grep -o 'wGB/s=[0-9.]*' | cut -d= -f2 | xargs printf "%.1f"
}

printf "%-8s %-26s %12s %12s %12s\n" "weights" "refit kernel" "ggml GB/s" "refit GB/s" "ggml again"
while read -r gtype bytes rrow; do
  g1=$(ggml_gbs "$gtype" "$bytes")
  r=$(refit_gbs "$rrow")
  g2=$(ggml_gbs "$gtype" "$bytes")
  printf "%-8s %-26s %12s %12s %12s\n" "$gtype" "$rrow" "$g1" "$r" "$g2"
done <<'EOF'
q8_0 34 q8_0_w8a8_interleaved
q8_0 34 q8_0_w8a8
mxfp4 17 mxfp4_w8a8
bf16 64 bf16
EOF
# The ceiling both work under: the same Q8_0 bytes read with no arithmetic (refit's BM_read).
read=$(REFIT_BENCH_K=$K REFIT_BENCH_N=$M REFIT_BENCH_MIB=1 "$QBENCH" --benchmark_filter="BM_read/q8_0/" 2>&1 |
  grep -o 'wGB/s=[0-9.]*' | cut -d= -f2 | xargs printf "%.1f")
echo "plain read of the same Q8_0 bytes (no arithmetic, refit's BM_read): $read GB/s"
