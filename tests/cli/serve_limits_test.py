"""Work and memory checked before they are spent, against a real `refit serve` (argv[1]: the
binary), measured by the server's peak RSS (VmHWM, reset through /proc/PID/clear_refs):

- a 120-byte /update_weights_from_tensor declaring gigabytes is refused without allocating;
- a prompt far over the context is refused by its length before it is tokenized;
- each route has its own body limit (413 before the body is read; a chunked body once it passes
  the limit), --max-request-bytes too;
- /get_weights_by_name is capped by --max-readback-bytes (400 naming truncate_size);
- the queue timeout holds while generation is paused (503, then serving goes on).
"""
import json
import select
import os
import socket
import sys
import threading
import time

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES = os.path.join(ROOT, "..", "shared", "oracle", "stories260K", "stories260K.gguf")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def peak_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def reset_peak(pid):
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def declared_only(s, path, length):
    """Sends headers declaring `length` bytes and a few of them; the status line answered."""
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {length}\r\n\r\n{{".encode())
        answer = sock.recv(4096).decode(errors="replace")
    return answer.split("\r\n", 1)[0]


s = RefitServer(REFIT, STORIES, "--queue-timeout", "1", "--max-readback-bytes", "4096")
try:
    greedy = {"prompt": [1, 400, 50], "max_tokens": 4, "temperature": 0}
    status, first = s.post("/v1/completions", greedy)
    check(status == 200, f"a completion: {status}")
    can_measure = reset_peak(s.pid)

    # ---- a declared shape costs nothing before its bytes are checked ----
    body = {"named_tensors": [{"name": "output.weight", "dtype": "float32", "shape": [1 << 15, 1 << 15],
                               "data": "AAAA"}]}
    raw = json.dumps(body).encode()
    before = peak_kib(s.pid)
    status, answer = s.post("/update_weights_from_tensor", raw=raw)
    grown = peak_kib(s.pid) - before
    check(status == 400 and "needs 4294967296 bytes" in json.dumps(answer),
          f"a {len(raw)}-byte tensor request declaring 4 GiB -> {status} {answer}")
    if can_measure:
        check(grown < 16 * 1024, f"... and the server's peak RSS grew {grown} KiB (under 16 MiB)")

    # ---- a prompt that cannot fit is refused before it is tokenized ----
    big = {"prompt": "Once upon a time " * 1_000_000, "max_tokens": 1}  # 17 MB
    reset_peak(s.pid)
    before = peak_kib(s.pid)
    status, answer = s.post("/v1/completions", big)
    grown = peak_kib(s.pid) - before
    check(status == 400 and answer["error"]["code"] == "context_length_exceeded"
          and "bytes cannot fit" in answer["error"]["message"], f"a 17 MB prompt -> {status} {str(answer)[:300]}")
    if can_measure:
        # The body and its parsed JSON (~3x 17 MB); tokenizing it took gigabytes.
        check(grown < 128 * 1024, f"... and the server's peak RSS grew {grown} KiB (under 128 MiB)")
    for path, req, field in [("/generate", {"text": big["prompt"]}, "text"),
                             ("/tokenize", {"prompt": big["prompt"]}, "prompt"),
                             ("/v1/chat/completions", {"messages": [{"role": "user", "content": big["prompt"]}]},
                              "messages")]:
        status, answer = s.post(path, req)
        text = json.dumps(answer)
        check(status == 400 and "cannot fit" in text and field in text, f"{path} 17 MB -> {status} {text[:200]}")

    # ---- per-route body limits ----
    check(" 413 " in declared_only(s, "/update_weights_from_disk", 2 << 20) + " ",
          "a 2 MiB /update_weights_from_disk body -> 413 (other routes take 1 MiB)")
    check(" 413 " in declared_only(s, "/v1/completions", 100 << 20) + " ", "a 100 MiB completion -> 413")
    status, answer = s.post("/v1/completions", {"prompt": "x" * (2 << 20)})
    check(status == 400 and answer["error"]["code"] == "context_length_exceeded",
          f"a 2 MiB completion is read (generation routes take more than 1 MiB): {status}")

    # ---- a chunked body is counted as it arrives, on every route (open probes too) ----
    def chunked_flood(method, path, total):
        """Streams `total` bytes of chunks (no Content-Length); the status line answered."""
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         f"Transfer-Encoding: chunked\r\n\r\n".encode())
            chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
            sent = 0
            sock.settimeout(5)
            try:
                while sent < total and not select.select([sock], [], [], 0)[0]:
                    sock.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # the server stopped reading: its answer is waiting
            sock.settimeout(30)
            try:
                answer = sock.recv(4096).decode(errors="replace")
            except OSError as e:
                answer = f"no answer: {e}"
        return answer.split("\r\n", 1)[0], sent
    for method, path in [("POST", "/health"), ("POST", "/update_weights_from_disk")]:
        line, sent = chunked_flood(method, path, 64 << 20)
        check(" 413 " in line + " " and sent < (16 << 20),
              f"{method} {path} with an endless chunked body -> 413 after {sent >> 10} KiB: {line!r}")
    # No route takes DELETE: answered (404) without the body being read to its end.
    line, sent = chunked_flood("DELETE", "/health", 64 << 20)
    check(line.startswith("HTTP/1.1 4") and sent < (16 << 20),
          f"DELETE /health with an endless chunked body -> answered after {sent >> 10} KiB: {line!r}")

    # ---- readback capped ----
    status, w = s.post("/get_weights_by_name", {"name": "model.embed_tokens.weight", "truncate_size": 1024})
    check(status == 200 and len(w["values"]) == 1024, f"1024 values (4096 bytes) read back: {status}")
    status, w = s.post("/get_weights_by_name", {"name": "model.embed_tokens.weight", "truncate_size": 1 << 40})
    check(status == 400 and "max-readback-bytes" in w["message"], f"2^40 values -> {status} {w}")

    # ---- the queue timeout holds while paused ----
    status, _ = s.post("/pause_generation", {"mode": "abort"})
    check(status == 200, f"pause: {status}")
    started = time.monotonic()
    status, answer = s.post("/v1/completions", greedy, timeout=60)
    waited = time.monotonic() - started
    check(status == 503 and "paused" in json.dumps(answer),
          f"a request while paused, --queue-timeout 1 -> {status} after {waited:.1f} s {answer}")
    s.post("/continue_generation", {})
    status, again = s.post("/v1/completions", greedy)
    check(status == 200 and again["choices"][0]["token_ids"] == first["choices"][0]["token_ids"],
          "the server serves the same answer after the refusals")
finally:
    rc = s.stop()
check(rc == 0, f"the server stopped cleanly: {rc}")
if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
