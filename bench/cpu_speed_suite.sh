#!/usr/bin/env bash
# Every CPU speed figure of the llama.cpp comparison in one command. It runs on the CPU's
# own kernels, then again with REFIT_CPU_ISA=avx2 where the CPU has AVX-512, so one run on
# an AVX-512 machine records both paths (llama.cpp runs as built both times).
#
#   bench/cpu_speed_suite.sh LLAMA_BIN_DIR [MODELS_DIR]
#
# Per ISA, then the summary tables:
#   - prefill and decode beside llama-bench (bench/side_by_side.sh, ROUNDS alternating
#     rounds, median per-round ratio) for medium F16, BF16, Q8_0 (also `--quant
#     q8_0-w8a8`, llama.cpp's int8 activations) and the gpt-oss-20b-shaped MXFP4 model
#     (also `--quant mxfp4-w8a8`);
#   - decode as a share of the rate at which the weights read in place (`refit bench`'s
#     own figures: against the best read pass before and after the runs, and paired, each
#     run against the read passes just before and after it);
#   - serving the small F16 model beside llama-server (bench/serve_side_by_side.mjs).
#
# LLAMA_BIN_DIR holds llama-bench and llama-server, built by you from llama.cpp with
# GGML_NATIVE=ON (refit neither ships nor builds them). MODELS_DIR (default
# /tmp/refit-bench-models) gets the synthetic GGUFs; `refit synth` writes any that are
# missing (~10 GB with MXFP4).
# Settings:
#   REFIT     build/refit
#   ROUNDS    3
#   P, N      512 and 64: prompt and generated tokens for medium
#   PM, NM    64 and 16: the same for MXFP4
#   T         2 threads
#   MXFP4=0   skips the MXFP4 model
#   SERVE=0   skips serving
#   CLIENTS   8,32
#   ISAS      "native avx2"; avx2 is dropped where the CPU lacks AVX-512
set -euo pipefail
if [[ $# -lt 1 ]]; then
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
LLAMA_DIR=$1
MODELS=${2:-/tmp/refit-bench-models}
HERE=$(cd "$(dirname "$0")" && pwd)
REFIT=${REFIT:-build/refit}
ROUNDS=${ROUNDS:-3} P=${P:-512} N=${N:-64} PM=${PM:-64} NM=${NM:-16} T=${T:-2}
MXFP4=${MXFP4:-1} SERVE=${SERVE:-1} CLIENTS=${CLIENTS:-8,32}
ISAS=${ISAS:-native avx2}
for exe in "$REFIT" "$LLAMA_DIR/llama-bench"; do
  [[ -x $exe ]] || { echo "cpu_speed_suite: $exe is not an executable" >&2; exit 2; }
done
if ((SERVE)) && [[ ! -x $LLAMA_DIR/llama-server ]]; then
  echo "cpu_speed_suite: $LLAMA_DIR/llama-server is not an executable (SERVE=0 skips serving)" >&2
  exit 2
fi
grep -qw avx512f /proc/cpuinfo || ISAS=$(tr ' ' '\n' <<<"$ISAS" | grep -vx avx2 | xargs)
[[ -n $ISAS ]] || ISAS=native
mkdir -p "$MODELS"

# The synthetic models, written once.
synth() {
  local file=$MODELS/$1
  shift
  [[ -s $file ]] && return
  echo "writing $file" >&2
  "$REFIT" synth "$@" --format gguf -q -o "$file.tmp" && mv "$file.tmp" "$file"
}
synth medium-f16.gguf --arch llama --preset medium --dtype f16
synth medium-bf16.gguf --arch llama --preset medium --dtype bf16
synth medium-q8_0.gguf --arch llama --preset medium --dtype q8_0
((MXFP4)) && synth gptoss20b-8l-mxfp4.gguf --arch gpt-oss --preset 20b --layers 8 --dtype bf16 \
  --mxfp4-experts
((SERVE)) && synth small-f16.gguf --arch llama --preset small --dtype f16

echo "refit $REFIT ($(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')), llama.cpp in" \
  "$LLAMA_DIR; $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); $(date -u +%FT%TZ)"
summary=() serving=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# One side_by_side.sh run: its output as it goes, and a summary row from its median line.
pair() {
  local isa=$1 label=$2 model=$3 p=$4 n=$5 args=${6:-} line
  echo
  echo "### $isa: $label (-p $p -n $n${args:+, $args})"
  REFIT="$REFIT" ROUNDS=$ROUNDS P=$p N=$n R=2 T=$T REFIT_ARGS="$args" \
    "$HERE/side_by_side.sh" "$LLAMA_DIR/llama-bench" "$MODELS/$model" | tee "$log"
  line=$(grep '^median refit / llama.cpp' "$log" | sed 's/^median refit \/ llama.cpp: //')
  # Decode as a share of the weights-read limit, from refit bench's own measurements.
  local out share paired
  out=$("$REFIT" bench -m "$MODELS/$model" -p 0 -n "$n" -r 5 -t "$T" $args 2>/dev/null || true)
  share=$(grep -o '[0-9]*% of the weights-read limit' <<<"$out" | cut -d' ' -f1 || true)
  paired=$(grep -o '[0-9]*% of the weights read beside each run' <<<"$out" | cut -d' ' -f1 || true)
  summary+=("| $isa | $label | ${line%%,*} | ${line#*, } | ${share:-?} | ${paired:-?} |")
}
for isa in $ISAS; do
  if [[ $isa == native ]]; then unset REFIT_CPU_ISA; else export REFIT_CPU_ISA=$isa; fi
  echo
  echo "## ISA: $isa ($("$REFIT" kernels 2>/dev/null | awk '/^cpu isa:/ && !seen { print; seen = 1 }'))"
  pair "$isa" "F16" medium-f16.gguf "$P" "$N"
  pair "$isa" "BF16" medium-bf16.gguf "$P" "$N"
  pair "$isa" "Q8_0" medium-q8_0.gguf "$P" "$N"
  pair "$isa" "Q8_0, q8_0-w8a8" medium-q8_0.gguf "$P" "$N" "--quant q8_0-w8a8"
  if ((MXFP4)); then
    pair "$isa" "MXFP4 (gpt-oss-20b shape, 8 layers)" gptoss20b-8l-mxfp4.gguf "$PM" "$NM"
    pair "$isa" "MXFP4, mxfp4-w8a8" gptoss20b-8l-mxfp4.gguf "$PM" "$NM" "--quant mxfp4-w8a8"
  fi
  if ((SERVE)); then
    echo
    echo "### $isa: serving small F16 beside llama-server"
    node "$HERE/serve_side_by_side.mjs" "$REFIT" "$LLAMA_DIR/llama-server" \
      "$MODELS/small-f16.gguf" --clients "$CLIENTS" --duration 15 --rounds 2 --threads "$T" |
      tee "$log"
    while read -r row; do
      serving+=("| $isa |${row#|}")
    done < <(grep -E '^\| [0-9]+ \|' "$log")
  fi
done
unset REFIT_CPU_ISA
echo
echo "## Summary (median of per-round refit / llama.cpp ratios)"
echo
echo "| ISA | model | prefill | decode | decode / weights-read limit | paired |"
echo "|---|---|---:|---:|---:|---:|"
printf '%s\n' "${summary[@]}"
if ((${#serving[@]})); then
  echo
  echo "| ISA | clients | refit tok/s (runs) | llama-server tok/s (runs) | each round | median |"
  echo "|---|---:|---:|---:|---:|---:|"
  printf '%s\n' "${serving[@]}"
fi
