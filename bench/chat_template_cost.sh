#!/usr/bin/env bash
# What a chat request's template render costs in refit (embedded Jinja2, GIL taken per
# render) next to the anchor: the same template rendered by jinja2 in Python the way
# transformers' apply_chat_template does (../shared/realhf/tools/render_ref.py, template
# compiled once, as transformers caches it). Both render the realhf Qwen2.5-Instruct
# template (tools, default system prompt) for its longest case.
# Usage: bench/chat_template_cost.sh [build/refit] [renders]
set -euo pipefail
cd "$(dirname "$0")/.."
REFIT=${1:-build/refit}
N=${2:-2000}
REALHF=../shared/realhf
MODEL=$REALHF/models/qwen2.5-instruct
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 - "$REALHF" "$TMP/request.json" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1] + "/cases.json"))["chat"]
c = next(c for c in cases if c["id"] == "tools_roundtrip")
json.dump({"messages": c["messages"], "tools": c["tools"]}, open(sys.argv[2], "w"))
PY
echo "refit chat-template ($N renders):"
"$REFIT" chat-template -m "$MODEL" --request "$TMP/request.json" --repeat "$N" >/dev/null
echo "anchor, jinja2 in Python as transformers sets it up ($N renders):"
/usr/bin/python3 - "$REALHF" "$MODEL" "$TMP/request.json" "$N" <<'PY'
import json, sys, time
sys.path.insert(0, sys.argv[1] + "/tools")
import render_ref
tc = json.load(open(sys.argv[2] + "/tokenizer_config.json"))
req = json.load(open(sys.argv[3]))
n = int(sys.argv[4])
special = render_ref.special_tokens_map(tc)
t = render_ref.compile_template(tc["chat_template"], render_ref.datetime.datetime.now())
def once():
    v = dict(messages=render_ref.template_messages(req["messages"]), tools=req["tools"], documents=None,
             add_generation_prompt=True, **special)
    return t.render(**v)
text = once()
start = time.perf_counter()
for _ in range(n):
    once()
us = (time.perf_counter() - start) / n * 1e6
print(f"{sys.argv[2]}: {us:.1f} us per render ({n} renders, {len(text.encode())} prompt bytes)")
PY
