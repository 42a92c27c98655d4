#!/usr/bin/env bash
# refit bench beside llama.cpp's llama-bench on the same GGUF files, in one run, so both see
# the same machine state: for each model, refit then llama-bench, then refit again (the
# second refit run shows how much the machine drifted during the pair).
#
#   bench/side_by_side.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf ...]
#
# LLAMA_BENCH is a llama-bench binary you built yourself (refit neither ships nor builds
# llama.cpp). Settings: REFIT (default build/refit), P (prompt, 128), N (generated, 32),
# T (threads, 2), R (repetitions, 3), D (depth: tokens already in the cache when each test
# starts, llama-bench's -d; 0 by default), REFIT_ARGS (more refit bench options, e.g.
# "--quant q8_0-w8a8": int8 activations, as llama.cpp computes Q8_0). Prints both tables
# and the load average around each.
# ROUNDS=n (for a VM whose speed drifts): instead, n rounds per model of one refit run and
# one llama-bench run (-r R each), their order swapped every round, and per round the
# refit / llama.cpp ratio of pp and tg; then the median of those ratios.
set -euo pipefail
if [[ $# -lt 2 ]]; then
 sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
LLAMA_BENCH=$1
shift
REFIT=${REFIT:-build/refit}
P=${P:-128} N=${N:-32} T=${T:-2} R=${R:-3} D=${D:-0}
[[ $D =~ ^[0-9]+$ ]] || { echo "side_by_side: D must be an integer >= 0" >&2; exit 2; }
for exe in "$REFIT" "$LLAMA_BENCH"; do
  [[ -x $exe ]] || { echo "side_by_side: $exe is not an executable" >&2; exit 2; }
done
echo "refit: $REFIT ($(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown))   llama-bench: $LLAMA_BENCH"
echo "settings: -p $P -n $N -t $T -r $R -d $D${ROUNDS:+, $ROUNDS rounds}; $(nproc) CPUs; $(date -u +%FT%TZ)"
# refit bench with the pair's flags; extra arguments go after them (e.g. --no-bandwidth).
ours() {
  "$REFIT" bench -m "$1" -p "$P" -n "$N" -t "$T" -r "$R" -d "$D" "${@:2}" ${REFIT_ARGS:-}
}
llama() {
  LD_LIBRARY_PATH="$(dirname "$LLAMA_BENCH")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$LLAMA_BENCH" -m "$1" -p "$P" -n "$N" -t "$T" -r "$R" -d "$D"
}
# The t/s of a markdown table's pp<P> and tg<N> rows (" @ d<D>" after them at a depth), as
# "PP TG" (0 where a row is absent).
speeds() {
  local at=""
  ((D > 0)) && at="@d$D"
  awk -F'|' -v pp="pp$P$at" -v tg="tg$N$at" '
    { gsub(/ /, "", $7); split($8, v, " ") }
    $7 == pp { p = v[1] } $7 == tg { t = v[1] }
    END { print (p ? p : 0), (t ? t : 0) }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
if [[ -n ${ROUNDS:-} ]]; then
  [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "side_by_side: ROUNDS must be an integer >= 1" >&2; exit 2; }
  for model in "$@"; do
    echo
    echo "== $model"
    printf '%-6s %12s %12s %12s %12s %9s %9s\n' round "refit pp" "llama pp" "refit tg" "llama tg" "pp ratio" "tg ratio"
    pp_ratios=() tg_ratios=()
    for ((round = 1; round <= ROUNDS; ++round)); do
      if ((round % 2)); then
        refit_speeds=$(ours "$model" --no-bandwidth | speeds)
        llama_speeds=$(llama "$model" | speeds)
      else
        llama_speeds=$(llama "$model" | speeds)
        refit_speeds=$(ours "$model" --no-bandwidth | speeds)
      fi
      read -r our_pp our_tg <<<"$refit_speeds"
      read -r their_pp their_tg <<<"$llama_speeds"
      pp_ratio=$(awk -v a="$our_pp" -v b="$their_pp" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
      tg_ratio=$(awk -v a="$our_tg" -v b="$their_tg" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
      pp_ratios+=("$pp_ratio") tg_ratios+=("$tg_ratio")
      printf '%-6s %12s %12s %12s %12s %9s %9s\n' "$round" "$our_pp" "$their_pp" "$our_tg" "$their_tg" "$pp_ratio" "$tg_ratio"
    done
    echo "median refit / llama.cpp: pp$P $(printf '%s\n' "${pp_ratios[@]}" | median)x, tg$N $(printf '%s\n' "${tg_ratios[@]}" | median)x"
  done
  exit 0
fi
for model in "$@"; do
  echo
  echo "== $model"
  echo "-- refit (load $(cut -d' ' -f1-3 /proc/loadavg))"
  ours "$model"
  echo "-- llama-bench (load $(cut -d' ' -f1-3 /proc/loadavg))"
  llama "$model"
  echo "-- refit again (load $(cut -d' ' -f1-3 /proc/loadavg))"
  ours "$model" --no-bandwidth
done
