#!/usr/bin/python3
"""What the HTTP layer of `refit serve` costs: requests per second on a model so small that
the engine's work is negligible (stories260K), from `--clients` threads, each request on a
new connection and then on kept-alive ones; and the server's CPU time per request (user +
system, from /proc), which the machine's load does not skew as it skews wall time.

    /usr/bin/python3 bench/http_overhead.py BINARY [BINARY...] [--requests 200] [--clients 8] [--rounds 3]

Binaries alternate within each round (the machine's load drifts); prints one line per run.
"""
import argparse
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "cli"))
from refit_server import RefitServer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORIES = os.path.join(ROOT, "..", "shared", "oracle", "stories260K", "stories260K.gguf")
BODY = json.dumps({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(port, requests, clients, keep_alive):
    per_client = requests // clients
    failures = []

    def client():
        conn = None
        for _ in range(per_client):
            if conn is None or not keep_alive:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v1/completions", BODY, {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                failures.append(r.status)
            if r.getheader("Connection", "").lower() == "close" or not keep_alive:
                conn.close()
                conn = None

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return per_client * clients / (time.time() - t0), len(failures)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for r in range(a.rounds):
        for b in a.binaries:
            s = RefitServer(b, STORIES)
            try:
                run(s.port, 16, 4, True)  # warm-up
                c0 = cpu_seconds(s.pid)
                new, f1 = run(s.port, a.requests, a.clients, keep_alive=False)
                c1 = cpu_seconds(s.pid)
                kept, f2 = run(s.port, a.requests, a.clients, keep_alive=True)
                c2 = cpu_seconds(s.pid)
            finally:
                s.stop()
            n = a.requests // a.clients * a.clients
            print(f"round {r + 1} {b}: new connections {new:.0f} req/s, {(c1 - c0) / n * 1e3:.2f} CPU ms/req; "
                  f"kept alive {kept:.0f} req/s, {(c2 - c1) / n * 1e3:.2f} CPU ms/req; {f1 + f2} failed", flush=True)


main()
