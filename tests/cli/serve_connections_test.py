#!/usr/bin/python3
"""`refit serve` against slow, idle, odd and departing clients (argv[1]: the binary).

What it holds refit to:
- 500 connections that drip a byte a second into their headers neither starve the server
  (/health and a completion are answered while they are open) nor stay: each is cut
  (408, then closed) by its request deadline, --request-read-timeout;
- the listen backlog takes 300 connections at once while the server accepts none;
- one connection more than --http-threads is answered 503 at once, not queued;
- a POST whose body has no length is refused 411 at once; one without a body and without
  Content-Length is served at once (RFC 9112 6.3); chunked bodies work;
- a client that half-closes after its request gets its answer (non-streaming and
  streaming); a client that closes stops its generation;
- a second server cannot bind a port that one serves;
- SIGTERM: a stream in flight ends with finish_reason "abort" and `data: [DONE]`, and the
  drain waits neither for idle keep-alive connections nor for clients still sending.
Bounds on time are "does not hang" bounds, far above what each step takes.
"""
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES = os.path.join(ROOT, "..", "shared", "oracle", "stories260K", "stories260K.gguf")
failures = []

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_answer(s, timeout=20):
    """Everything the server sends until it closes (or `timeout`): (status, headers, body)."""
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            if b"content-length:" in head.lower() and _:
                n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= n:
                    break
    except (socket.timeout, ConnectionResetError):
        pass
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else None
    return status, head.decode(errors="replace"), body


def read_until_closed(s, timeout):
    """(what the server sent, whether it closed the connection) within `timeout`."""
    data, end = b"", time.time() + timeout
    while True:
        s.settimeout(max(0.05, end - time.time()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return data, False
        except OSError:
            return data, True
        if not chunk:
            return data, True
        data += chunk


def safe(call):
    """A request's (status, body), or (None, the error) when it failed or hung."""
    try:
        return call()
    except Exception as e:  # noqa: BLE001 - reported by the check that follows
        return None, str(e)


def raw_post(path, body, extra=b""):
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n").encode() + extra + b"\r\n" + data


def metric(server, name):
    _, text = server.get("/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def wait_for(pred, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


COMPLETION = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}

s = RefitServer(REFIT, STORIES, "--request-read-timeout", "4", "--keep-alive-timeout", "30")
try:
    # ---- backlog: 300 connects complete while the server accepts nothing ----
    os.kill(s.pid, signal.SIGSTOP)
    socks = []
    try:
        for _ in range(300):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", s.port))
            socks.append(c)
        pending = set(socks)
        end = time.time() + 5
        while pending and time.time() < end:
            _, w, _ = select.select([], list(pending)[:500], [], 0.2)
            for c in w:
                if c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    pending.discard(c)
    finally:
        os.kill(s.pid, signal.SIGCONT)
    check(not pending, f"backlog: {300 - len(pending)} of 300 connects completed while the server was stopped")
    for c in socks:
        c.setblocking(True)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    answered = sum(read_answer(c)[0] == 200 for c in socks)
    for c in socks:
        c.close()
    check(answered == 300, f"backlog: {answered} of 300 connections answered /health")

    # ---- 500 slow drips: the server keeps answering, then cuts them by their deadline ----
    drips = []
    for i in range(500):
        c = connect(s.port)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: ")
        drips.append(c)
    stop_dripping = threading.Event()

    def drip():
        while not stop_dripping.is_set():
            for c in drips:
                try:
                    c.send(b"a")
                except OSError:
                    pass
            stop_dripping.wait(1.0)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    t0 = time.time()
    time.sleep(1.5)
    status, health = safe(lambda: s.get("/health", timeout=2))
    check(status == 200, f"/health with 500 drips open: {status} {health}")
    status, j = safe(lambda: s.post("/v1/completions", COMPLETION, timeout=10))
    check(status == 200 and len(j["choices"][0]["token_ids"]) == 4, f"a completion with 500 drips open: {status} {str(j)[:200]}")
    cut, timeouts = 0, 0
    for c in drips:
        data, closed = read_until_closed(c, timeout=t0 + 4 + 10 - time.time())
        timeouts += data.startswith(b"HTTP/1.1 408")
        cut += closed
    stop_dripping.set()
    for c in drips:
        c.close()
    print(f"drips: {cut} of 500 closed by the server ({timeouts} answered 408) within {time.time() - t0:.1f} s")
    check(cut == 500 and timeouts == 500, f"drips: {cut} of 500 closed, {timeouts} answered 408")

    # ---- bodies and their lengths ----
    c = connect(s.port)
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n"
              + json.dumps(COMPLETION).encode())
    status, _, body = read_answer(c, timeout=2)
    c.close()
    err = json.loads(body or b"{}").get("error", {})
    check(status == 411 and err.get("code") == "length_required", f"a body without its length: {status} {body[:200]}")
    c = connect(s.port)
    c.sendall(b"POST /continue_generation HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    status, _, body = read_answer(c, timeout=2)
    c.close()
    check(status == 200, f"a POST without a body and without Content-Length: {status} {body[:200]}")
    data = json.dumps(COMPLETION).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 7]), data[i:i + 7]) for i in range(0, len(data), 7)) + b"0\r\n\r\n"
    c = connect(s.port)
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked)
    status, _, body = read_answer(c)
    c.close()
    check(status == 200 and len(json.loads(body)["choices"][0]["token_ids"]) == 4, f"a chunked body: {status} {body[:200]}")

    # ---- half-closed clients get their answers; a closed one stops its generation ----
    long_body = {"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0, "ignore_eos": True}
    c = connect(s.port)
    c.sendall(raw_post("/v1/completions", long_body))
    c.shutdown(socket.SHUT_WR)
    status, _, body = read_answer(c)
    c.close()
    check(status == 200 and len(json.loads(body)["choices"][0]["token_ids"]) == 200,
          f"half-closed after its request: {status} {body[:200]}")
    c = connect(s.port)
    c.sendall(raw_post("/v1/completions", dict(long_body, stream=True)))
    c.shutdown(socket.SHUT_WR)
    status, _, body = read_answer(c)
    c.close()
    check(status == 200 and body.rstrip().endswith(b"0") and b"data: [DONE]" in body,
          f"half-closed after a streaming request: {status} {body[-200:]}")

    before = metric(s, "refit_generation_tokens_total")
    c = connect(s.port)
    c.sendall(raw_post("/v1/completions", dict(long_body, max_tokens=1500)))
    wait_for(lambda: metric(s, "refit_running_requests") > 0, 10)
    c.close()
    check(wait_for(lambda: metric(s, "refit_running_requests") == 0, 20), "a client that closed: its request still runs")
    generated = metric(s, "refit_generation_tokens_total") - before
    check(generated < 1500, f"a client that closed: {generated} tokens generated for it")

    # ---- one port, one server ----
    other = subprocess.Popen([REFIT, "serve", "-m", STORIES, "--port", str(s.port), "-t", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = other.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        other.kill()
        _, err = other.communicate()
    check(other.returncode not in (0, -9) and "cannot listen" in err,
          f"a second server on port {s.port}: exit {other.returncode} {err[-300:]}")
finally:
    rc = s.stop()
check(rc == 0, f"first server: exit {rc}")

# ---- connection limit, then SIGTERM: the stream is told, idle and sending clients do not hold the exit ----
d = RefitServer(REFIT, STORIES, "--http-threads", "6", "--keep-alive-timeout", "60", "--shutdown-timeout", "60")
try:
    idle = [connect(d.port) for _ in range(6)]
    time.sleep(0.3)  # accepted, each holding a thread
    c = connect(d.port)
    status, _, body = read_answer(c, timeout=5)
    c.close()
    check(status == 503 and b"too_many_connections" in body, f"one connection over --http-threads 6: {status} {body[:200]}")
    for c in idle:
        c.close()
    check(wait_for(lambda: safe(lambda: d.get("/health", timeout=2))[0] == 200, 5), "the connections closed: /health")

    stream = connect(d.port)
    stream.sendall(raw_post("/v1/completions", {"prompt": "Once", "max_tokens": 1500, "temperature": 0,
                                                "ignore_eos": True, "stream": True}))
    stream.settimeout(20)
    first = b""
    while b"data: " not in first:
        chunk = stream.recv(65536)
        if not chunk:
            break
        first += chunk
    check(b"data: " in first, f"the stream started: {first[:200]}")
    d.post("/pause_generation", {"mode": "in_place"})  # the stream stays in flight
    keep_alive = connect(d.port)
    keep_alive.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    keep_alive.settimeout(5)
    check(keep_alive.recv(65536).startswith(b"HTTP/1.1 200"), "keep-alive connection: /health")
    sending = connect(d.port)
    sending.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # its headers never end
    t0 = time.time()
    os.kill(d.pid, signal.SIGTERM)
    try:
        rc = d.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        d.proc.kill()
        rc = "timeout"
    print(f"SIGTERM with a paused stream, an idle and a sending connection: exit {rc} in {time.time() - t0:.1f} s")
    check(rc == 0, f"SIGTERM: exit {rc}")
    rest = first
    try:
        while True:
            chunk = stream.recv(65536)
            if not chunk:
                break
            rest += chunk
    except OSError:
        pass
    events = [line[6:] for line in rest.decode(errors="replace").split("\n") if line.startswith("data: ")]
    last = json.loads(events[-2]) if len(events) >= 2 and events[-1].strip() == "[DONE]" else {}
    check(last.get("choices", [{}])[0].get("finish_reason") == "abort",
          f"SIGTERM: the stream ended with {events[-2:] if events else rest[-200:]}")
    for c in (stream, keep_alive, sending):
        c.close()
finally:
    if d.proc.poll() is None:
        d.proc.kill()

if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print("serve connections: all checks passed")
