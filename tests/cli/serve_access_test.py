#!/usr/bin/python3
"""Who may drive `refit serve` (src/server/request_guard.h, weights_root.h; docs/security.md),
checked over real HTTP against servers on stories260K (CTest runs this file; argv[1] is the
refit binary):

  * --api-key / --admin-api-key: no key 401, a wrong key 401, the ordinary key on an admin
    route 403, the admin key updates the weights from disk; /health and /metrics stay open.
  * A body sent as text/plain (a page's request that skips the CORS preflight) 415.
  * A foreign Origin on a route that changes something 403; a rebound Host name 403.
  * --weights-root: a path outside it is refused with the same words whether it exists or
    not; a FIFO is refused at once (with and without a root; a request timeout keeps the test
    from hanging); a text file that is no checkpoint is named without its bytes.
  * After every refusal, generation still gives the same greedy tokens, on the same
    connection too when the client keeps it alive.
"""
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import time

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES_HF = os.path.join(ROOT, "..", "shared", "oracle", "stories260K", "hf")
PROMPT = [1, 403, 407, 261, 378]
USER, ADMIN = "user-key-3f9a", "admin-key-77c1"
# /etc/shadow-like: as a llama2.c header its first word is "dim = 1953460082".
SHADOW = "root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return bool(cond)


def call(server, method, path, body=None, headers=None, key=None, timeout=60, conn=None):
    """(status, parsed JSON or text, response headers); `body` a dict (sent as JSON) or bytes."""
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    h.update(headers or {})
    h = {k: v for k, v in h.items() if v is not None}
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    own = conn is None
    c = conn or http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        c.putrequest(method, path, skip_host="Host" in h)
        for k, v in h.items():
            c.putheader(k, v)
        if data is not None:
            c.putheader("Content-Length", str(len(data)))
        c.endheaders(data)
        r = c.getresponse()
        raw = r.read()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = raw.decode(errors="replace")
        return r.status, answer, dict(r.getheaders())
    finally:
        if own:
            c.close()


def message(answer):
    """The words of an error body: OpenAI's {"error": {"message"}} or SGLang's {"message"}."""
    if isinstance(answer, dict):
        if isinstance(answer.get("error"), dict):
            return answer["error"].get("message", "")
        return str(answer.get("message", ""))
    return str(answer)


def generate(server, key):
    status, out, _ = call(server, "POST", "/generate", {"input_ids": PROMPT, "sampling_params": {
        "max_new_tokens": 8, "temperature": 0}}, key=key)
    return out.get("output_ids") if status == 200 and isinstance(out, dict) else (status, out)


def refused(server, what, status, want_status, answer, baseline, key, *needles, absent=()):
    """A refusal: its status, OpenAI/SGLang body with each needle, no word of `absent`, and
    the server generating as before."""
    text = message(answer)
    check(status == want_status, f"{what}: status {status}, wanted {want_status}: {answer}")
    for n in needles:
        check(n in text, f"{what}: the message lacks {n!r}: {text!r}")
    for a in absent:
        check(a not in json.dumps(answer), f"{what}: the answer shows {a!r}: {answer}")
    check(generate(server, key) == baseline, f"{what}: generation changed after the refusal")


def main():
    tmp = tempfile.mkdtemp(prefix="refit_access_")
    weights = os.path.join(tmp, "weights")
    shutil.copytree(STORIES_HF, os.path.join(weights, "step-1"))
    with open(os.path.join(weights, "shadow"), "w") as f:
        f.write(SHADOW)
    os.mkfifo(os.path.join(weights, "pipe"))
    secret = os.path.join(tmp, "secret-outside.safetensors")
    with open(secret, "w") as f:
        f.write(SHADOW)
    os.symlink(secret, os.path.join(weights, "link-out"))

    s = RefitServer(REFIT, STORIES_HF, "--weights-root", weights,
                    env=dict(os.environ, REFIT_API_KEY=USER, REFIT_ADMIN_API_KEY=ADMIN))
    try:
        baseline = generate(s, USER)
        check(isinstance(baseline, list) and len(baseline) == 8, f"generation with the key: {baseline}")

        # ---- keys ----
        for path in ("/health", "/metrics"):
            st, _, _ = call(s, "GET", path)
            check(st == 200, f"GET {path} without a key: {st} (probes stay open)")
        st, out, hdr = call(s, "POST", "/generate", {"input_ids": PROMPT})
        refused(s, "no key", st, 401, out, baseline, USER, "Authorization: Bearer", "--api-key")
        check(out.get("error", {}).get("type") == "authentication_error", f"no key: {out}")
        check(hdr.get("WWW-Authenticate") == "Bearer", f"no key: WWW-Authenticate {hdr}")
        st, out, _ = call(s, "GET", "/v1/models", key="wrong-key-xyz")
        refused(s, "a wrong key", st, 401, out, baseline, USER, "not this server's",
                absent=("wrong-key-xyz", USER, ADMIN))
        st, out, _ = call(s, "GET", "/v1/models", headers={"Authorization": "Basic " + USER})
        refused(s, "a Basic credential", st, 401, out, baseline, USER, "Bearer", absent=(USER,))
        for path, body in (("/update_weights_from_disk", {"model_path": "step-1"}),
                           ("/get_weights_by_name", {"name": "model.norm.weight"}),
                           ("/pause_generation", {}), ("/release_memory_occupation", {})):
            st, out, _ = call(s, "POST", path, body, key=USER)
            refused(s, f"the ordinary key on {path}", st, 403, out, baseline, USER, "--admin-api-key",
                    absent=(USER, ADMIN))
        st, out, _ = call(s, "POST", "/update_weights_from_disk", {"model_path": "step-1"})
        refused(s, "no key on an admin route", st, 401, out, baseline, USER, "admin key")
        st, out, _ = call(s, "POST", "/update_weights_from_disk", {"model_path": "step-1",
                                                                   "weight_version": "step-1"}, key=ADMIN)
        check(st == 200 and out.get("success") is True, f"the admin key's disk update: {st} {out}")
        check(out.get("weight_version") == "step-1", f"the update's label: {out}")
        check(generate(s, ADMIN) == baseline, "the admin key generates (the same weights, copied)")

        # ---- content type, Origin, Host ----
        st, out, _ = call(s, "POST", "/update_weights_from_disk", b'{"model_path": "step-1"}',
                          headers={"Content-Type": "text/plain;charset=UTF-8"}, key=ADMIN)
        refused(s, "a text/plain body", st, 415, out, baseline, USER, "application/json")
        st, out, _ = call(s, "POST", "/update_weights_from_disk", {"model_path": "step-1"},
                          headers={"Origin": "https://attacker.example"}, key=ADMIN)
        refused(s, "a foreign Origin", st, 403, out, baseline, USER, "origin", "--allowed-origins")
        st, out, _ = call(s, "POST", "/generate", {"input_ids": PROMPT},
                          headers={"Origin": f"http://localhost:{s.port}"}, key=USER)
        check(st == 200, f"a loopback Origin: {st} {out}")
        st, out, _ = call(s, "GET", "/v1/models", headers={"Host": f"attacker.example:{s.port}"}, key=USER)
        refused(s, "a rebound Host", st, 403, out, baseline, USER, "attacker.example", "--allowed-hosts")
        st, out, _ = call(s, "GET", "/v1/models", headers={"Host": f"localhost:{s.port}"}, key=USER)
        check(st == 200, f"Host localhost: {st} {out}")

        # A refusal is answered before the body is read, so the connection ends with it: the
        # body's bytes are never taken for a next request (pipelined here behind it).
        raw = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        body = b'{"input_ids": [1]}'
        raw.sendall(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
                    b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (USER.encode(), len(body), body) +
                    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = b""
        try:
            while chunk := raw.recv(65536):
                got += chunk
        except socket.timeout:
            got += b"<no end of connection in 30 s>"
        raw.close()
        check(got.startswith(b"HTTP/1.1 415") and got.count(b"HTTP/1.1") == 1 and b"Connection: close" in got,
              f"a pipelined request after a refusal: {got!r}")
        # A client that keeps connections alive (http.client here, requests' Session) reads the
        # answer's Connection: close and opens a new one for its next request.
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        st, out, hdr = call(s, "POST", "/generate", body, headers={"Content-Type": "text/plain"}, key=USER,
                            conn=conn)
        check(st == 415 and hdr.get("Connection") == "close", f"keep-alive: the refusal {st} {hdr}")
        st, out, _ = call(s, "POST", "/generate", {"input_ids": PROMPT, "sampling_params": {
            "max_new_tokens": 8, "temperature": 0}}, key=USER, conn=conn)
        check(st == 200 and out.get("output_ids") == baseline, f"keep-alive: the next request: {st} {out}")
        conn.close()

        # ---- paths ----
        answers = {}
        for name, path in (("existing", secret), ("missing", os.path.join(tmp, "no-such-file")),
                           ("symlink", os.path.join(weights, "link-out")),
                           ("dotdot", os.path.join(weights, "..", "secret-outside.safetensors")),
                           ("relative", "../secret-outside.safetensors")):
            st, out, _ = call(s, "POST", "/update_weights_from_disk", {"model_path": path}, key=ADMIN)
            refused(s, f"a path outside the root ({name})", st, 403, out, baseline, USER, "--weights-root",
                    absent=("secret-outside", "root:", "1953460082"))
            answers[name] = message(out)
        check(len(set(answers.values())) == 1, f"outside-root answers differ: {answers}")
        st, out, _ = call(s, "POST", "/update_weights", {"model_path": secret}, key=ADMIN)
        refused(s, "vLLM's /update_weights outside the root", st, 403, out, baseline, USER,
                "--weights-root")

        t0 = time.monotonic()
        try:
            st, out, _ = call(s, "POST", "/update_weights_from_disk", {"model_path": "pipe"}, key=ADMIN,
                              timeout=30)
        except socket.timeout:
            st, out = "timeout", {}
        refused(s, "a FIFO inside the root", st, 400, out, baseline, USER, "FIFO")
        check(time.monotonic() - t0 < 30, "the FIFO was waited on")

        st, out, _ = call(s, "POST", "/update_weights_from_disk", {"model_path": "shadow"}, key=ADMIN)
        refused(s, "a text file inside the root", st, 400, out, baseline, USER, "not a checkpoint refit reads",
                absent=("1953460082", "root:", "$6$", "dim ="))
        check(out.get("success") is False, f"a text file: {out}")
    finally:
        rc = s.stop()
        check(rc == 0, f"the keyed server exits {rc}")

    # Without keys or a root (loopback): every route open, a FIFO and a text file still refused.
    s = RefitServer(REFIT, STORIES_HF)
    try:
        baseline = generate(s, None)
        check(not any("warning" in line for line in s.stderr), f"a loopback server warns: {s.stderr}")
        try:
            st, out, _ = call(s, "POST", "/update_weights_from_disk",
                              {"model_path": os.path.join(weights, "pipe")}, timeout=30)
        except socket.timeout:
            st, out = "timeout", {}
        refused(s, "a FIFO (no root)", st, 400, out, baseline, None, "FIFO")
        try:
            st, out, _ = call(s, "POST", "/update_weights", {"model_path": os.path.join(weights, "pipe")},
                              timeout=30)
        except socket.timeout:
            st, out = "timeout", {}
        refused(s, "a FIFO through /update_weights (no root)", st, 400, out, baseline, None, "FIFO")
        st, out, _ = call(s, "POST", "/update_weights_from_disk", {"model_path": os.path.join(weights, "shadow")})
        refused(s, "a text file (no root)", st, 400, out, baseline, None, "not a checkpoint refit reads",
                absent=("1953460082", "root:", "dim ="))
        st, out, _ = call(s, "POST", "/update_weights_from_disk", {"model_path": os.path.join(weights, "step-1")})
        check(st == 200 and out.get("success") is True, f"no keys: the disk update: {st} {out}")
        st, out, _ = call(s, "POST", "/pause_generation", b"{}", headers={"Content-Type": "text/plain"})
        refused(s, "text/plain without keys", st, 415, out, baseline, None, "application/json")
    finally:
        rc = s.stop()
        check(rc == 0, f"the open server exits {rc}")
        shutil.rmtree(tmp, ignore_errors=True)


main()
if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print("serve access: all checks passed")
