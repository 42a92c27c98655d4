#!/usr/bin/python3
"""Weight sync from a real torch.distributed trainer (SGLang's init_weights_update_group
family) end to end; CTest runs this file, argv[1] is the refit binary.

At TP 1 and (with mpirun) TP 2: a torch 1.13 trainer process (weight_sync_trainer.py,
gloo) creates its group as SGLang's init_custom_process_group does while the engine joins
it through /init_weights_update_group; /update_weights_from_distributed then receives the
trainer's broadcasts. Checked, bit for bit against fresh servers on the same weights
(greedy token ids and logprobs of token-id prompts): a per-tensor update, a refused
wrong-shape and unknown-name update (the engine keeps serving, the group stays usable),
a flattened-bucket update, a trainer SIGKILLed mid-update (old weights kept, a new group
then works), destroy; `backend: "nccl"` refused; an unreachable master fails within the
timeout. Exit 77 (CTest skip) when the build has no gloo.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import safetensors_io  # noqa: E402

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
HF = os.path.join(ROOT, "..", "shared", "oracle", "stories260K", "hf")
TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weight_sync_trainer.py")
PROMPTS = [[1, 403, 407, 261, 378], [1, 12, 90, 7], [1, 300, 301, 302, 303, 304, 305]]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server(RefitServer):
    def __init__(self, model, tp, env=None):
        super().__init__(REFIT, model, tp=tp, env=env)
        self.tp = tp

    def outputs(self):
        """Greedy token ids and logprobs for every prompt (one request each)."""
        out = []
        for ids in PROMPTS:
            status, j = self.post("/v1/completions", {"prompt": ids, "max_tokens": 12, "temperature": 0, "logprobs": 3})
            if status != 200:
                out.append(("error", status, j))
                continue
            c = j["choices"][0]
            out.append((c["token_ids"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"]))
        return out

    def stop(self):
        return super().stop(timeout=60)


class Trainer:
    """The trainer process; init() runs its group creation and the engine's join together."""

    def __init__(self, world_size, group, env=None, plain=False):
        self.port, self.group, self.world_size = free_port(), group, world_size
        self.proc = subprocess.Popen(["/usr/bin/python3", TRAINER, "127.0.0.1", str(self.port), str(world_size), group]
                                     + (["plain"] if plain else []),
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Importing torch takes seconds on a busy machine: the engine's join (with its
        # timeout) starts once the trainer is about to create its group.
        started = self.line()
        if started != "started":
            raise SystemExit(f"the trainer did not start: {started!r} {self.proc.stderr.read()}")

    def line(self):
        return self.proc.stdout.readline().strip()

    def command(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.command(op="exit")
                self.proc.wait(timeout=30)
            except Exception:
                self.proc.kill()


def in_thread(fn):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", fn()))
    t.start()
    return t, box


def meta(named):
    return {"names": [n for n, _ in named], "dtypes": [str(t.dtype).replace("torch.", "") for _, t in named],
            "shapes": [list(t.shape) for _, t in named]}


def update(server, trainer, file, named, kill_after=None, timeout=120, **extra):
    """POST the update while the trainer broadcasts `file`; returns (status, reply)."""
    body = dict(meta(named), group_name=trainer.group, **extra)
    t, box = in_thread(lambda: server.post("/update_weights_from_distributed", body, timeout=timeout))
    trainer.command(op="broadcast", file=file, bucket=extra.get("load_format") == "flattened_bucket",
                    kill_after=kill_after)
    t.join()
    return box["r"]


def run_tp(tp, old, new, files, fresh_old, fresh_new):
    s = Server(HF, tp)
    try:
        check(s.outputs() == fresh_old, f"tp {tp}: the server's outputs before any sync differ from a fresh one's")
        # 1. SGLang's contract: the trainer creates the group while the engine joins it.
        tr = Trainer(1 + tp, "refit_sync_a")
        t, box = in_thread(lambda: s.post("/init_weights_update_group", {
            "master_address": "127.0.0.1", "master_port": tr.port, "rank_offset": 1, "world_size": 1 + tp,
            "group_name": tr.group, "backend": "gloo", "some_future_field": 1}))
        ready = tr.line()
        t.join()
        status, j = box["r"]
        if "without gloo" in j.get("message", ""):
            print("refit was built without gloo: skipping the weight sync test")
            tr.proc.kill()
            sys.exit(77)
        check(status == 200 and j["success"] and ready == "ready" and f"keys under '/{tr.group}/{tr.group}/'" in j["message"],
              f"tp {tp} init: {status} {j} trainer {ready!r}")
        # 2. A per-tensor update to the new weights: the engine equals a fresh one on them.
        status, j = update(s, tr, files["new"], new, weight_version="step-1")
        check(status == 200 and j["success"] and j["weight_version"] == "step-1" and tr.line() == "ok",
              f"tp {tp} update: {status} {j}")
        report = j.get("report", {})
        check(report.get("tensors_written") == len(new) and report.get("check_finite") is True and j.get("ignored") == []
              and report.get("bytes") == sum(t.numel() * t.element_size() for _, t in new), f"tp {tp} report: {report}")
        check(s.outputs() == fresh_new, f"tp {tp}: after the update the outputs differ from a fresh server's on the new weights")
        # 3. Refused updates (received, so the group stays in step): a wrong shape, an unknown name.
        for what, file, named in [("wrong shape", files["wrong_shape"], files["wrong_shape_named"]),
                                  ("unknown name", files["unknown"], files["unknown_named"])]:
            status, j = update(s, tr, file, named, weight_version="bad")
            check(status == 400 and not j["success"] and j["weight_version"] == "step-1" and tr.line() == "ok",
                  f"tp {tp} {what}: {status} {j}")
            print(f"tp {tp} {what}: {j['message']}")
            check(s.outputs() == fresh_new, f"tp {tp}: a refused update ({what}) changed the outputs")
        # A diverged trainer's NaN is refused by default on every rank; the group stays in step.
        status, j = update(s, tr, files["nan"], files["nan_named"], weight_version="bad")
        check(status == 400 and "element [3, 5] is nan" in j.get("message", "") and tr.line() == "ok",
              f"tp {tp} NaN: {status} {j}")
        check(s.outputs() == fresh_new, f"tp {tp}: a refused NaN update changed the outputs")
        # The unknown name set aside on request (every rank): the rest lands, the name is listed.
        status, j = update(s, tr, files["unknown"], files["unknown_named"], ignore_unknown_tensors=True)
        check(status == 200 and j.get("ignored") == [files["unknown_named"][0][0]]
              and j.get("report", {}).get("tensors_written") == 1 and tr.line() == "ok",
              f"tp {tp} unknown name ignored: {status} {j}")
        check(s.outputs() == fresh_new, f"tp {tp}: the ignored-name update (same q) changed the outputs")
        # SGLang's older one-tensor form {name, dtype, shape} (AReaL's callers of that era).
        q = "model.layers.0.self_attn.q_proj.weight"
        t, box = in_thread(lambda: s.post("/update_weights_from_distributed", {
            "name": q, "dtype": "float32", "shape": list(dict(new)[q].shape), "group_name": tr.group}))
        tr.command(op="broadcast", file=files["new_q"], bucket=False, kill_after=None)
        t.join()
        check(box["r"][0] == 200 and box["r"][1]["success"] and tr.line() == "ok", f"tp {tp} one-tensor form: {box['r']}")
        check(s.outputs() == fresh_new, f"tp {tp}: the one-tensor update (same values) changed the outputs")
        # 4. Back to the old weights in one flattened bucket (slime's newer path).
        status, j = update(s, tr, files["old"], old, load_format="flattened_bucket", weight_version="step-2",
                           flush_cache=False, abort_all_requests=True)
        check(status == 200 and j["success"] and j["weight_version"] == "step-2" and tr.line() == "ok",
              f"tp {tp} bucket update: {status} {j}")
        check(s.outputs() == fresh_old, f"tp {tp}: after the bucket update the outputs differ from a fresh server's")
        # 5. The trainer dies (SIGKILL) after 3 of its broadcasts: nothing is committed.
        status, j = update(s, tr, files["new"], new, kill_after=3, weight_version="never")
        tr.proc.wait(timeout=30)
        check(status == 400 and not j["success"] and j["weight_version"] == "step-2",
              f"tp {tp} trainer killed mid-update: {status} {j}")
        print(f"tp {tp} trainer killed: {j['message']}")
        check(s.outputs() == fresh_old, f"tp {tp}: a trainer killed mid-update changed the outputs")
        status, j = s.post("/update_weights_from_distributed", dict(meta(new), group_name=tr.group))
        check(status == 400 and "broken" in j["message"], f"tp {tp} update on the broken group: {status} {j}")
        # 6. A new trainer, a new group (slime's calling convention: its own group name, rank
        #    offset 1, bfloat16 tensors in a flattened bucket labelled by str(step)): joins and updates.
        tr2 = Trainer(1 + tp, "slime-pp_0")
        t, box = in_thread(lambda: s.post("/init_weights_update_group", {
            "master_address": "127.0.0.1", "master_port": tr2.port, "rank_offset": 1, "world_size": 1 + tp,
            "group_name": tr2.group, "backend": "gloo"}))
        ready = tr2.line()
        t.join()
        check(box["r"][0] == 200 and ready == "ready", f"tp {tp} init after the failure: {box['r']}")
        status, j = update(s, tr2, files["new_bf16"], files["new_bf16_named"], weight_version="3",
                           load_format="flattened_bucket")
        check(status == 200 and j["weight_version"] == "3" and tr2.line() == "ok", f"tp {tp} update after the failure: {status} {j}")
        check(s.outputs() == fresh_new, f"tp {tp}: after the new group's update the outputs differ from a fresh server's")
        for g in ("slime-pp_0", "refit_sync_a"):
            status, j = s.post("/destroy_weights_update_group", {"group_name": g})
            check(status == 200 and j["success"], f"tp {tp} destroy {g}: {status} {j}")
        status, j = s.post("/destroy_weights_update_group", {"group_name": "slime-pp_0"})
        check(status == 400 and "no weight update group" in j["message"], f"tp {tp} destroy twice: {status} {j}")
        tr2.close()
        # 7. Refusals before any rendezvous.
        status, j = s.post("/init_weights_update_group", {"master_address": "127.0.0.1", "master_port": 1,
                                                          "rank_offset": 1, "world_size": 1 + tp, "group_name": "n",
                                                          "backend": "nccl"})
        check(status == 400 and "nccl" in j["message"] and "gloo" in j["message"], f"tp {tp} nccl: {status} {j}")
        t0 = time.time()
        status, j = s.post("/init_weights_update_group", {"master_address": "127.0.0.1", "master_port": free_port(),
                                                          "rank_offset": 1, "world_size": 1 + tp, "group_name": "u",
                                                          "backend": "gloo", "timeout": 2})
        took = time.time() - t0
        check(status == 400 and "cannot reach" in j["message"] and took < 6, f"tp {tp} unreachable master ({took:.1f} s): {status} {j}")
        print(f"tp {tp} unreachable master after {took:.1f} s: {j['message']}")
        # 8. A trainer that stops broadcasting: the group's timeout (3 s here) ends the update
        #    with an error, not a hang; a malformed request (it cannot be received) leaves the
        #    group rather than pairing later broadcasts with the wrong tensors.
        tr3 = Trainer(1 + tp, "silent")
        t, box = in_thread(lambda: s.post("/init_weights_update_group", {
            "master_address": "127.0.0.1", "master_port": tr3.port, "rank_offset": 1, "world_size": 1 + tp,
            "group_name": "silent", "backend": "gloo", "timeout": 3}))
        ready = tr3.line()
        t.join()
        check(box["r"][0] == 200 and ready == "ready", f"tp {tp} init with timeout 3: {box['r']}")
        t0 = time.time()
        status, j = s.post("/update_weights_from_distributed", dict(meta(new), group_name="silent"))
        took = time.time() - t0
        check(status == 400 and "imed out" in j["message"] and took < 10, f"tp {tp} silent trainer ({took:.1f} s): {status} {j}")
        print(f"tp {tp} silent trainer after {took:.1f} s: {j['message'][:160]}")
        status, j = s.post("/update_weights_from_distributed", dict(meta(new), group_name="silent", dtypes=["float32"]))
        check(status == 400 and "left group 'silent'" in j["message"], f"tp {tp} malformed update: {status} {j}")
        status, j = s.post("/destroy_weights_update_group", {"group_name": "silent"})
        check(status == 400, f"tp {tp} the malformed update did not leave the group: {status} {j}")
        tr3.proc.kill()
        check(s.outputs() == fresh_new, f"tp {tp}: the outputs changed at the end")
    finally:
        s.stop()


def two_devices(new, files, fresh_new):
    """GLOO_SOCKET_IFNAME=lo,lo on both sides: torch's ProcessGroupGloo then has two
    contexts and runs broadcast tag t on context t % 2; the engine must do the same. This
    trainer also makes its group without SGLang's outer PrefixStore (keys under '/g/')."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo,lo")
    s = Server(HF, 1, env)
    try:
        tr = Trainer(2, "two_devices", env, plain=True)
        t, box = in_thread(lambda: s.post("/init_weights_update_group", {
            "master_address": "127.0.0.1", "master_port": tr.port, "rank_offset": 1, "world_size": 2,
            "group_name": tr.group, "backend": "gloo", "timeout": 60}))
        ready = tr.line()
        t.join()
        check(box["r"][0] == 200 and ready == "ready" and "2 gloo device(s)" in box["r"][1]["message"]
              and "keys under '/two_devices/')" in box["r"][1]["message"],
              f"two devices init: {box['r']}")
        status, j = update(s, tr, files["new"], new, weight_version="2dev")
        check(status == 200 and tr.line() == "ok", f"two devices update: {status} {j}")
        check(s.outputs() == fresh_new, "two devices: the outputs differ from a fresh server's on the new weights")
        tr.close()
    finally:
        s.stop()


def main():
    work = tempfile.mkdtemp(prefix="refit-weight-sync-")
    try:
        old_t = safetensors_io.load(os.path.join(HF, "model.safetensors"))
        names = sorted(old_t)
        g = torch.Generator().manual_seed(0)
        # Perturbed, then rounded to bfloat16 values: the same weights broadcast as float32
        # or as bfloat16 (in a flattened bucket: torch 1.13's gloo cannot broadcast bf16).
        new_t = {n: ((t + 0.05 * t.std().clamp(min=1e-3) * torch.randn(t.shape, generator=g)) if t.dim() > 1
                     else t * 1.01).bfloat16().float()
                 for n, t in old_t.items()}
        new_dir = os.path.join(work, "new")
        os.makedirs(new_dir)
        shutil.copy(os.path.join(HF, "config.json"), new_dir)
        safetensors_io.save(new_t, os.path.join(new_dir, "model.safetensors"))
        old = [(n, old_t[n]) for n in names]
        new = [(n, new_t[n]) for n in names]
        q = "model.layers.0.self_attn.q_proj.weight"
        wrong = [(q, new_t[q].t().contiguous()[:-1])]
        unknown = [("model.layers.0.self_attn.no_such.weight", new_t[q]), (q, new_t[q])]
        files = {}
        new_bf16 = [(n, t.bfloat16()) for n, t in new]
        nan_q = new_t[q].clone()
        nan_q[3, 5] = float("nan")
        nan = [(q, nan_q)]
        for key, named in [("old", old), ("new", new), ("new_bf16", new_bf16), ("wrong_shape", wrong),
                           ("unknown", unknown), ("new_q", [(q, new_t[q])]), ("nan", nan)]:
            files[key] = os.path.join(work, key + ".pt")
            torch.save(named, files[key])
        files["wrong_shape_named"], files["unknown_named"], files["new_bf16_named"] = wrong, unknown, new_bf16
        files["nan_named"] = nan

        tps = [1] + ([2] if shutil.which("mpirun") else [])
        if len(tps) == 1:
            print("mpirun not found: the TP 2 half of the weight sync test is skipped")
        for tp in tps:
            t0 = time.time()
            fresh = Server(HF, tp)
            fresh_old = fresh.outputs()
            fresh.stop()
            fresh = Server(new_dir, tp)
            fresh_new = fresh.outputs()
            fresh.stop()
            check(fresh_old != fresh_new, "the perturbed weights give the same outputs: the test could not tell")
            run_tp(tp, old, new, files, fresh_old, fresh_new)
            print(f"tp {tp} done in {time.time() - t0:.1f} s", flush=True)
            if tp == 1:
                two_devices(new, files, fresh_new)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("weight sync from torch.distributed: all checks passed")


if __name__ == "__main__":
    main()
