#!/usr/bin/python3
"""refit's chat prompts against Jinja2 set up as transformers sets it up (CTest runs this file).

    chat_template_jinja_test.py build/refit                  # the ../shared/realhf models
    chat_template_jinja_test.py build/refit TEMPLATES_DIR    # every *.jinja of a folder, e.g. a
                                                             # copy of llama.cpp's models/templates

For each template and each conversation (every chat case of ../shared/realhf/cases.json, each
again with tools, with chat_template_kwargs {"enable_thinking": false}, and without the
generation prompt), the prompt `refit chat-template` prints must equal what
realhf/tools/render_ref.py renders (Debian's python3-jinja2, transformers' environment) byte
for byte, or both must refuse the conversation. The realhf models use their own special tokens
(tokenizer_config.json + special_tokens_map.json); a templates folder gets placeholder ones
from a tokenizer_config.json beside each template, as in a model folder. This goes beyond the
fixed references in realhf/refs: new conversations rendered by the reference at test time.
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REALHF = os.path.join(ROOT, "..", "shared", "realhf")
sys.path.insert(0, os.path.join(REALHF, "tools"))
import render_ref  # noqa: E402

PLACEHOLDER_SPECIAL = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "unk_token": "<unk>"}


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def requests():
    cases = load(os.path.join(REALHF, "cases.json"))["chat"]
    tools = next(c["tools"] for c in cases if "tools" in c)
    for c in cases:
        base = {"messages": c["messages"], **({"tools": c["tools"]} if "tools" in c else {})}
        yield c["id"], base
        if "tools" not in c:
            yield c["id"] + "+tools", {**base, "tools": tools}
        yield c["id"] + "+no_think", {**base, "chat_template_kwargs": {"enable_thinking": False}}
        yield c["id"] + "+no_generation_prompt", {**base, "add_generation_prompt": False}


def folder_template(folder):
    """The template and special tokens transformers would use for a model folder."""
    if os.path.exists(os.path.join(folder, "chat_template.jinja")):
        text = open(os.path.join(folder, "chat_template.jinja"), encoding="utf-8").read()
    else:
        text = load(os.path.join(folder, "tokenizer_config.json"))["chat_template"]
    tc = load(os.path.join(folder, "tokenizer_config.json"))
    stm = os.path.join(folder, "special_tokens_map.json")
    return text, render_ref.special_tokens_map(tc, load(stm) if os.path.exists(stm) else None)


def compare(name, folder, text, special, tmp, bad):
    diffs = compared = 0
    now = datetime.datetime.now()
    for case, body in requests():
        try:
            want = render_ref.render(text, body["messages"], body.get("tools"),
                                     body.get("add_generation_prompt", True), special,
                                     body.get("chat_template_kwargs"), now)
        except Exception:  # the template refuses this conversation
            want = None
        req = os.path.join(tmp, "request.json")
        with open(req, "w", encoding="utf-8") as f:
            json.dump(body, f, ensure_ascii=False)
        r = subprocess.run([REFIT, "chat-template", "-m", folder, "--request", req], capture_output=True,
                           timeout=120)
        got = r.stdout.decode("utf-8", errors="replace") if r.returncode == 0 else None
        compared += 1
        if got != want:
            diffs += 1
            first = next((i for i, (a, b) in enumerate(zip(got or "", want or "")) if a != b), None)
            bad.append(f"{name} / {case}: refit "
                       f"{'refused: ' + r.stderr.decode(errors='replace')[-300:] if got is None else repr(got[max(0, (first or 0) - 40):(first or 0) + 80])}"
                       f" vs jinja2 {'refused' if want is None else repr(want[max(0, (first or 0) - 40):(first or 0) + 80])}")
    print(f"{'ok  ' if diffs == 0 else 'DIFF'} {name} ({compared} conversations)")
    return compared


REFIT = sys.argv[1]
bad, total, templates = [], 0, 0
with tempfile.TemporaryDirectory() as tmp:
    if len(sys.argv) > 2:
        folder = os.path.join(tmp, "model")
        os.makedirs(folder)
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump(PLACEHOLDER_SPECIAL, f)
        for name in sorted(f for f in os.listdir(sys.argv[2]) if f.endswith(".jinja")):
            text = open(os.path.join(sys.argv[2], name), encoding="utf-8").read()
            with open(os.path.join(folder, "chat_template.jinja"), "w", encoding="utf-8") as f:
                f.write(text)
            total += compare(name, folder, text, PLACEHOLDER_SPECIAL, tmp, bad)
            templates += 1
    else:
        for name, m in sorted(load(os.path.join(REALHF, "models.json"))["models"].items()):
            folder = os.path.join(REALHF, m["dir"])
            text, special = folder_template(folder)
            total += compare(name, folder, text, special, tmp, bad)
            templates += 1
print(f"{templates} templates, {total} conversations, {len(bad)} differences")
for b in bad:
    print("  FAIL:", b)
sys.exit(1 if bad else 0)
