#!/usr/bin/env bash
# refit bench beside llama.cpp's llama-bench on the same GGUF files, in one run, so both see
# the same machine state: for each model, refit then llama-bench, then refit again (the
# second refit run shows how much the machine drifted during the pair).
#
#   bench/side_by_side.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf ...]
#
# LLAMA_BENCH is a llama-bench binary you built yourself (refit neither ships nor builds
# llama.cpp). Settings: REFIT (default build/refit), P (prompt, 128), N (generated, 32),
# T (threads, 2), R (repetitions, 3), REFIT_ARGS (more refit bench options, e.g.
# "--quant q8_0-w8a8": int8 activations, as llama.cpp computes Q8_0). Prints both tables
# and the load average around each.
set -euo pipefail
if [[ $# -lt 2 ]]; then
 sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
LLAMA_BENCH=$1
shift
REFIT=${REFIT:-build/refit}
P=${P:-128} N=${N:-32} T=${T:-2} R=${R:-3}
for exe in "$REFIT" "$LLAMA_BENCH"; do
  [[ -x $exe ]] || { echo "side_by_side: $exe is not an executable" >&2; exit 2; }
done
echo "refit: $REFIT ($(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown))   llama-bench: $LLAMA_BENCH"
echo "settings: -p $P -n $N -t $T -r $R; $(nproc) CPUs; $(date -u +%FT%TZ)"
for model in "$@"; do
  echo
  echo "== $model"
  echo "-- refit (load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$REFIT" bench -m "$model" -p "$P" -n "$N" -t "$T" -r "$R" ${REFIT_ARGS:-}
  echo "-- llama-bench (load $(cut -d' ' -f1-3 /proc/loadavg))"
  LD_LIBRARY_PATH="$(dirname "$LLAMA_BENCH")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$LLAMA_BENCH" -m "$model" -p "$P" -n "$N" -t "$T" -r "$R"
  echo "-- refit again (load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$REFIT" bench -m "$model" -p "$P" -n "$N" -t "$T" -r "$R" --no-bandwidth ${REFIT_ARGS:-}
done
