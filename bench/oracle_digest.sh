#!/usr/bin/env bash
# Prints one sha256 per (model, prompt, engine setting) of the f32 logits refit computes
# for every model in ../shared/oracle: greedy decoding from each reference prompt, every
# position's logits (`refit generate --logits`). Run it before and after a refactor and
# diff the two outputs: identical lines mean bitwise-identical logits.
# Usage: bench/oracle_digest.sh [refit binary] > digest.txt
set -uo pipefail
cd "$(dirname "$0")/.."
REFIT=${1:-build/refit}
ORACLE=../shared/oracle
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # label, then refit generate arguments
  local label=$1; shift
  local launch=()
  [ -n "${REFIT_MPIRUN:-}" ] && launch=(mpirun --allow-run-as-root --oversubscribe -np 2)
  if "${launch[@]}" "$REFIT" generate "$@" -n 32 --ignore-eos -t 2 --logits "$out/l.f32" >/dev/null 2>"$out/err"; then
    echo "$label $(sha256sum "$out/l.f32" | cut -c1-16)"
  else
    echo "$label error: $(tail -1 "$out/err")"
  fi
}

S=$ORACLE/stories260K
for p in "1 403 407 259" "1 70 300 41"; do
  ids=${p// /,}
  run "stories.bin[$ids]" -m $S/stories260K.bin --tokenizer $S/tok512.bin --prompt-ids "$p"
  run "stories.gguf[$ids]" -m $S/stories260K.gguf --prompt-ids "$p"
  run "stories.hf[$ids]" -m $S/hf --prompt-ids "$p"
  for q in q8_0 fp8; do run "stories.hf.$q[$ids]" -m $S/hf --quant $q --prompt-ids "$p"; done
done
for dir in $ORACLE/llamacpp/*/; do
  gguf=$(ls "$dir"*.gguf)
  for tokens in "$dir"*.tokens.txt; do
    ids=$(sed -n 's/^prompt_ids: //p' "$tokens")
    name=$(basename "$dir")/$(basename "$tokens" .tokens.txt)
    run "$name" -m "$gguf" --prompt-ids "$ids"
    run "$name.layout=plain" -m "$gguf" --layout plain --prompt-ids "$ids"
    case $name in llama-f32/*|qwen3-f32/*)
      for q in q8_0 q8_0-w8a8 fp8 mxfp4-w8a8; do run "$name.quant=$q" -m "$gguf" --quant $q --prompt-ids "$ids"; done
      REFIT_MPIRUN=1 run "$name.tp=2" -m "$gguf" --tp 2 --prompt-ids "$ids";;
    esac
  done
done
