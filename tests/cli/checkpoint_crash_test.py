#!/usr/bin/python3
"""Crash consistency of weight updates from disk, against a real `refit serve` (CTest runs
this file; argv[1] is the refit binary).

  * The server is SIGKILLed at seeded random points of an update_weights_from_disk from
    checkpoint A to B, then restarted on A: every restart answers greedy requests exactly
    as a fresh server on A does, and neither checkpoint's files changed (refit never writes
    them, so a killed update cannot leave a mix behind).
  * The writer is killed instead: a checkpoint folder left half-written (its safetensors
    file truncated, or empty) is refused with an error naming the file, and the server keeps
    serving A under its old version.
  * The writer truncates the file while the server reads it (a trainer rewriting its
    checkpoint in place): the server never dies; each update either commits B whole (greedy
    equals a fresh server on B) or is refused with A still served.
"""
import hashlib
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
PROMPTS = [[1, 450, 4996, 17354], [1, 20, 30, 40, 50]]
N = 8
KILLS = 8
RACES = 8

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def synth(out, seed):
    rc = os.spawnv(os.P_WAIT, REFIT, [REFIT, "synth", "--preset", "tiny", "--dtype", "f32", "--seed", str(seed), "--format", "hf",
                                      "-o", out, "-q"])
    if rc != 0:
        raise SystemExit(f"refit synth failed ({rc})")


def digest(folder):
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            h.update(name.encode() + f.read())
    return h.hexdigest()


def greedy(server):
    out = []
    for p in PROMPTS:
        status, j = server.post("/v1/completions", {"prompt": p, "max_tokens": N, "temperature": 0, "logprobs": 1})
        if status != 200:
            return ("error", status, j)
        c = j["choices"][0]
        out.append((c["token_ids"], c["logprobs"]["token_logprobs"]))
    return out


def version(server):
    status, j = server.get("/get_weight_version")
    return j.get("weight_version") if status == 200 else None


def update(server, path, answers):
    try:
        answers.append(server.post("/update_weights_from_disk", {"model_path": path}, timeout=60))
    except Exception as e:  # the connection dies with a killed server
        answers.append(("dropped", repr(e)))


def alive(server):
    return server.proc.poll() is None


def main():
    tmp = tempfile.mkdtemp(prefix="refit_crash_")
    try:
        a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        synth(a, 1)
        synth(b, 2)
        digests = {a: digest(a), b: digest(b)}

        fresh_b = RefitServer(REFIT, b)
        want_b = greedy(fresh_b)
        fresh_b.stop()

        server = RefitServer(REFIT, a)
        want_a = greedy(server)
        check(want_a != want_b, "the two checkpoints must answer differently for the test to mean anything")
        # How long one update takes here: the kill points are spread over it.
        start = time.monotonic()
        answers = []
        update(server, b, answers)
        span = time.monotonic() - start
        check(answers[0][0] == 200, f"update A -> B: {answers[0]}")
        check(greedy(server) == want_b, "after a whole update to B, greedy equals a fresh server on B")
        update(server, a, answers)

        # ---- the server killed mid-update --------------------------------------------------
        rng = random.Random(22)
        for k in range(KILLS):
            answers = []
            t = threading.Thread(target=update, args=(server, b, answers))
            t.start()
            time.sleep(rng.uniform(0, 1.2 * span))
            os.kill(server.pid, signal.SIGKILL)
            server.proc.wait(timeout=30)
            t.join(timeout=60)
            server = RefitServer(REFIT, a)
            check(greedy(server) == want_a, f"kill {k}: restarted on A, greedy equals a fresh server on A")
        for path, d in digests.items():
            check(digest(path) == d, f"{path}: the checkpoint's files are unchanged after the kills")

        # ---- the writer killed: half-written checkpoints are refused ------------------------
        v0 = version(server)
        for cut in ("half", "empty"):
            half = os.path.join(tmp, f"written_{cut}")
            shutil.copytree(b, half)
            weights = os.path.join(half, "model.safetensors")
            os.truncate(weights, os.path.getsize(weights) // 2 if cut == "half" else 0)
            status, j = server.post("/update_weights_from_disk", {"model_path": half})
            check(status == 400 and "model.safetensors" in j.get("message", ""),
                  f"a {cut} written checkpoint is refused naming its file: {status} {j}")
            check(alive(server) and version(server) == v0, f"{cut}: version unchanged after the refusal")
            check(greedy(server) == want_a, f"{cut}: still serving A after the refusal")

        # ---- the writer truncates the file while the server reads it ------------------------
        race = os.path.join(tmp, "race")
        outcomes = []
        for k in range(RACES):
            shutil.rmtree(race, ignore_errors=True)
            shutil.copytree(b, race)
            answers = []
            t = threading.Thread(target=update, args=(server, race, answers))
            t.start()
            time.sleep(rng.uniform(0.1 * span, 0.9 * span))
            weights = os.path.join(race, "model.safetensors")
            os.truncate(weights, os.path.getsize(weights) // 3)
            t.join(timeout=60)
            status, j = answers[0] if answers else ("none", {})
            if status not in (200, 400):  # no answer: wait to see whether the server died
                try:
                    server.proc.wait(timeout=10)
                except Exception:
                    pass
            if not check(alive(server) and status in (200, 400),
                         f"race {k}: the server survives a truncation under its read and answers "
                         f"({status} {j}; exit {server.proc.poll()})"):
                server.proc.kill()
                server = RefitServer(REFIT, a)
                continue
            outcomes.append(status if status == 200 else j.get("message", "")[-50:])
            if status == 400:
                check("changed while it was read" in j.get("message", "") or "model.safetensors" in j.get("message", ""),
                      f"race {k}: the refusal names the file: {j}")
            got = greedy(server)
            check(got == (want_b if status == 200 else want_a),
                  f"race {k}: {status} leaves one whole checkpoint served")
            if status == 200:
                update(server, a, [])
        server.stop()
        print(f"one update takes {span:.3f} s; kills at seeded points in [0, {1.2 * span:.3f}] s; "
              f"truncation races: {outcomes}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("ok")


main()
