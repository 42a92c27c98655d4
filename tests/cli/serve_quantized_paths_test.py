#!/usr/bin/python3
"""A server that quantizes its checkpoint at load (--quant) still finds the checkpoint's files
(CTest runs this file; argv[1] is refit): its chat template, the path /get_server_info reports,
and the file /reload_weights opens again. (The engine's description carries a quantization
note; the path must not.)
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refit_server import RefitServer  # noqa: E402

REFIT = sys.argv[1]
TEMPLATE = ("{% for m in messages %}<<{{ m.role }}:{{ m.content }}>>{% endfor %}"
            "{% if add_generation_prompt %}<<assistant:{% endif %}")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


with tempfile.TemporaryDirectory() as tmp:
    model = os.path.join(tmp, "m")
    subprocess.run([REFIT, "synth", "--preset", "tiny", "--format", "hf", "-q", "-o", model], check=True)
    with open(os.path.join(model, "chat_template.jinja"), "w") as f:
        f.write(TEMPLATE)
    s = RefitServer(REFIT, model, "--quant", "q8_0")
    try:
        status, info = s.get("/get_server_info")
        check(status == 200 and info.get("model_path") == model, f"model_path is the folder: {info.get('model_path')!r}")
        _, chat = s.post("/tokenize", {"messages": [{"role": "user", "content": "hi"}]})
        _, text = s.post("/tokenize", {"prompt": "<<user:hi>><<assistant:", "add_special_tokens": False})
        check(chat.get("tokens") == text.get("tokens"), "the chat is rendered with the folder's own template")
        status, reload = s.post("/reload_weights", {})
        check(status == 200 and reload.get("success"), f"/reload_weights opens the folder again: {status} {reload}")
    finally:
        check(s.stop() == 0, "the server stopped cleanly")

if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
