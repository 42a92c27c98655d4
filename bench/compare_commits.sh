#!/usr/bin/env bash
# Two refit builds side by side in one run (`refit bench` pp and tg), alternating, so both
# see the same machine state and drift shows:
#
#   bench/compare_commits.sh OLD_REFIT NEW_REFIT [MODEL ...]
#
# OLD_REFIT / NEW_REFIT are two built refit binaries (e.g. from `git worktree add` of two
# commits). MODEL is a GGUF / HF folder / llama2.c file, or `demo` for the built-in demo
# model (the default). Per model, ROUNDS rounds (default 3) of one `refit bench` each;
# the order within a round goes old-new, new-old, old-new, ... (ORDER=abba, the default,
# cancels a steady drift) or always old-new (ORDER=ab). Settings: P (prompt, 512), N
# (generated, 128), T (threads, 2), R (repetitions per run, 5), OUT (folder for the raw
# JSON, default a new temporary one). A run's figure is the median of its R repetitions;
# the table gives per build the median and min..max over rounds, the median of the
# per-round ratios new/old, the median CPU share (`refit_cpu_share`: CPU time the run got
# over T threads' wall time; under 100% means other processes took cores) and the range of
# the 1-minute load average seen before each run.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
OLD=$1 NEW=$2
shift 2
MODELS=("$@")
[[ ${#MODELS[@]} -gt 0 ]] || MODELS=(demo)
ROUNDS=${ROUNDS:-3} P=${P:-512} N=${N:-128} T=${T:-2} R=${R:-5} ORDER=${ORDER:-abba}
OUT=${OUT:-$(mktemp -d /tmp/compare_commits.XXXXXX)}
mkdir -p "$OUT"
for exe in "$OLD" "$NEW"; do
  [[ -x $exe ]] || { echo "compare_commits: $exe is not an executable" >&2; exit 2; }
done
commit_of() { git -C "$(dirname "$1")/.." rev-parse --short HEAD 2>/dev/null || echo unknown; }
echo "old: $OLD ($(commit_of "$OLD"))   new: $NEW ($(commit_of "$NEW"))"
echo "settings: -p $P -n $N -t $T -r $R, $ROUNDS rounds, order $ORDER; $(nproc) CPUs;" \
  "$(lscpu | sed -n 's/^Model name: *//p'); $(date -u +%FT%TZ); raw JSON in $OUT"

run_one() {  # build model_index model round
  local exe=$OLD; [[ $1 == new ]] && exe=$NEW
  local margs=(); [[ $3 != demo ]] && margs=(-m "$3")
  local f="$OUT/m$2-r$4-$1.json"
  cut -d' ' -f1 /proc/loadavg >"$f.load"
  "$exe" bench "${margs[@]}" -p "$P" -n "$N" -t "$T" -r "$R" --no-bandwidth -o json >"$f"
  echo "  round $4 $1 (load before $(cat "$f.load"))"
}

for i in "${!MODELS[@]}"; do
  echo "== ${MODELS[$i]}"
  for ((r = 1; r <= ROUNDS; r++)); do
    if [[ $ORDER == abba && $((r % 2)) == 0 ]]; then order=(new old); else order=(old new); fi
    for b in "${order[@]}"; do run_one "$b" "$i" "${MODELS[$i]}" "$r"; done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" "$ROUNDS" "${MODELS[@]}" <<'EOF'
import json, statistics as st, sys
out, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def fig(i, r, b):
    runs = json.load(open(f"{out}/m{i}-r{r}-{b}.json"))
    d = {(f"pp{x['n_prompt']}" if x["n_prompt"] else f"tg{x['n_gen']}"): st.median(x["samples_ts"])
         for x in runs}
    d.update({"share " + k: x["refit_cpu_share"] for x in runs
              for k in [f"pp{x['n_prompt']}" if x["n_prompt"] else f"tg{x['n_gen']}"]})
    d["load"] = float(open(f"{out}/m{i}-r{r}-{b}.json.load").read())
    return d
def rng(v): return f"{st.median(v):.1f} ({min(v):.1f}..{max(v):.1f})"
print()
print("| model | test | old t/s median (min..max) | new t/s median (min..max) | new/old median (min..max) | CPU share old, new | load 1-min |")
print("|---|---|---|---|---|---|---|")
for i, m in enumerate(models):
    runs = {b: [fig(i, r, b) for r in range(1, rounds + 1)] for b in ("old", "new")}
    loads = [x["load"] for b in runs for x in runs[b]]
    for t in [k for k in runs["old"][0] if k != "load" and not k.startswith("share")]:
        o = [x[t] for x in runs["old"]]; n = [x[t] for x in runs["new"]]
        q = [b / a for a, b in zip(o, n)]
        name = "demo (built-in)" if m == "demo" else m.rsplit("/", 1)[-1]
        print(f"| {name} | {t} | {rng(o)} | {rng(n)} | {st.median(q):.3f} ({min(q):.3f}..{max(q):.3f}) "
              f"| {st.median(x['share ' + t] for x in runs['old']):.0%}, "
              f"{st.median(x['share ' + t] for x in runs['new']):.0%} "
              f"| {min(loads):.2f}..{max(loads):.2f} |")
EOF
