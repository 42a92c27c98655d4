"""refit.LLM's weight sync from a torch.distributed trainer, in-process (SGLang's
init_weights_update_group / update_weights_from_distributed, OpenRLHF's
init_process_group / update_weight).

A real torch 1.13 trainer (tests/cli/weight_sync_trainer.py: the group made as SGLang's and
OpenRLHF's init_process_group do — a TCPStore it hosts as rank 0, PrefixStore(group_name),
ProcessGroupGloo) broadcasts perturbed stories260K weights; the LLM joins as rank 1.
Checked: after an update the LLM's greedy token ids and logprobs (and its state_dict) equal
a fresh refit.LLM loaded from the same weights written to a safetensors folder, bit for
bit; a flattened-bucket update back; a wrong shape and an unknown name are refused with the
weights unchanged and the group still usable; the receive releases the GIL (generate runs
meanwhile); a trainer SIGKILLed mid-broadcast raises (the group is broken: re-init) and
leaves the old weights; a new group then works; refusals (nccl, use_ray, malformed
updates, unknown groups) name what was wrong.
"""
import asyncio
import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import threading

import pytest
import torch

import refit
from conftest import STORIES_HF, require
import safetensors_io

TRAINER = pathlib.Path(__file__).resolve().parents[1] / "cli" / "weight_sync_trainer.py"
PROMPTS = [[1, 403, 407, 261, 378], [1, 12, 90, 7], [1, 300, 301, 302, 303, 304, 305]]
PARAMS = refit.SamplingParams(temperature=0, max_tokens=12, logprobs=3, ignore_eos=True)
Q = "model.layers.0.self_attn.q_proj.weight"

pytestmark = pytest.mark.skipif(not refit._refit.has_gloo, reason="refit was built without gloo (libgloo-dev)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Trainer:
    """The trainer process (rank 0 of a world of 2); its commands go over stdin."""

    def __init__(self, group, workdir):
        self.port, self.group = free_port(), group
        self.err = open(os.path.join(workdir, f"trainer-{group}-{self.port}.err"), "w+")
        self.proc = subprocess.Popen(["/usr/bin/python3", str(TRAINER), "127.0.0.1", str(self.port), "2", group],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True)
        assert self.line() == "started", self.stderr()  # torch imported; the group comes next

    def line(self):
        return self.proc.stdout.readline().strip()

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def broadcast(self, file, bucket=False, kill_after=None):
        self.proc.stdin.write(json.dumps({"op": "broadcast", "file": file, "bucket": bucket,
                                          "kill_after": kill_after}) + "\n")
        self.proc.stdin.flush()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        self.err.close()


def outputs(llm):
    """Greedy token ids and (token, logprob, rank) of the sampled and top-3 tokens, per prompt."""
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], PARAMS, use_tqdm=False)
    return [(list(o.outputs[0].token_ids),
             [[(t, lp.logprob, lp.rank) for t, lp in d.items()] for d in o.outputs[0].logprobs]) for o in outs]


def meta(named):
    return [n for n, _ in named], [t.dtype for _, t in named], [t.shape for _, t in named]


def same_state(a, b):
    sa, sb = a.engine.state_dict(), b.engine.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(torch.from_dlpack(sa[k]), torch.from_dlpack(sb[k])) for k in sa)


@pytest.fixture(scope="module")
def setup():
    work = tempfile.mkdtemp(prefix="refit-llm-weight-sync-")
    try:
        hf = require(STORIES_HF)
        old_t = safetensors_io.load(str(hf / "model.safetensors"))
        g = torch.Generator().manual_seed(0)
        new_t = {n: ((t + 0.05 * t.std().clamp(min=1e-3) * torch.randn(t.shape, generator=g)) if t.dim() > 1
                     else t * 1.01) for n, t in old_t.items()}
        new_dir = os.path.join(work, "new")
        os.makedirs(new_dir)
        shutil.copy(hf / "config.json", new_dir)
        safetensors_io.save(new_t, os.path.join(new_dir, "model.safetensors"))
        names = sorted(old_t)
        named = {"old": [(n, old_t[n]) for n in names], "new": [(n, new_t[n]) for n in names],
                 "wrong_shape": [(Q, new_t[Q].t().contiguous()[:-1])],
                 "unknown": [("model.layers.0.self_attn.no_such.weight", new_t[Q]), (Q, new_t[Q])],
                 "q_new": [(Q, new_t[Q])]}
        files = {}
        for key, tensors in named.items():
            files[key] = os.path.join(work, key + ".pt")
            torch.save(tensors, files[key])
        fresh = refit.LLM(str(hf))
        fresh_old = outputs(fresh)
        fresh.close()
        fresh_new_llm = refit.LLM(new_dir)
        fresh_new = outputs(fresh_new_llm)
        assert fresh_old != fresh_new, "the perturbed weights give the same outputs: the test could not tell"
        yield dict(work=work, hf=str(hf), named=named, files=files, fresh_old=fresh_old, fresh_new=fresh_new,
                   fresh_new_llm=fresh_new_llm)
        fresh_new_llm.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_sync_from_a_torch_trainer_equals_a_fresh_engine(setup):
    s, files, named = setup, setup["files"], setup["named"]
    llm = refit.LLM(s["hf"])
    trainers = []
    try:
        assert outputs(llm) == s["fresh_old"]
        # OpenRLHF's call (its LLMRayActor maps 1:1): the trainer makes the group while the engine joins.
        tr = Trainer("refit_py_sync", s["work"])
        trainers.append(tr)
        description = llm.init_process_group("127.0.0.1", tr.port, 1, 2, tr.group, backend="gloo", timeout=60)
        assert tr.line() == "ready"
        assert "rank 1 of 2" in description and f"'/{tr.group}/{tr.group}/'" in description, description

        # 1. Every tensor, one broadcast each; the receive blocks with the GIL released, so
        #    generation (the scheduler's thread and this one) goes on until the trainer sends.
        v0 = llm.weight_version
        box = {}
        t = threading.Thread(target=lambda: box.setdefault(
            "v", llm.update_weights_from_distributed(*meta(named["new"]), group_name=tr.group)))
        t.start()
        assert outputs(llm) == s["fresh_old"]  # ran while the update waited for the trainer
        tr.broadcast(files["new"])
        t.join(60)
        assert not t.is_alive() and tr.line() == "ok"
        assert box["v"] == llm.weight_version > v0
        assert outputs(llm) == s["fresh_new"]
        assert same_state(llm, s["fresh_new_llm"])
        after_new = llm.weight_version

        # 2. Refused after receiving (the group stays in step): a wrong shape, an unknown name.
        for what, key, word in [("wrong shape", "wrong_shape", "shape"), ("unknown name", "unknown", "no_such")]:
            tr.broadcast(files[key])
            with pytest.raises(refit.UpdateError, match="unchanged") as e:
                llm.update_weights_from_distributed(*meta(named[key]), group_name=tr.group)
            assert word in str(e.value) and "stays usable" in str(e.value), str(e.value)
            print(f"{what}: {e.value}")
            assert tr.line() == "ok"
            assert llm.weight_version == after_new and outputs(llm) == s["fresh_new"], what

        # 3. OpenRLHF's update_weight (one tensor a call, the group of init_process_group;
        #    dtype a torch.dtype, shape a torch.Size), also through collective_rpc as its actor calls it.
        tr.broadcast(files["q_new"])
        v = llm.update_weight(Q, torch.float32, named["q_new"][0][1].shape, empty_cache=True)
        assert tr.line() == "ok" and v == llm.weight_version == after_new + 1
        tr.broadcast(files["q_new"])
        assert llm.collective_rpc("update_weight", args=(Q, torch.float32, list(named["q_new"][0][1].shape))) == [v + 1]
        assert tr.line() == "ok" and outputs(llm) == s["fresh_new"]

        # 4. Back to the old weights in one flattened bucket (SGLang's load_format).
        tr.broadcast(files["old"], bucket=True)
        llm.update_weights_from_distributed(*meta(named["old"]), group_name=tr.group, load_format="flattened_bucket")
        assert tr.line() == "ok" and outputs(llm) == s["fresh_old"]
        llm.destroy_weights_update_group(tr.group)
        with pytest.raises(refit.Error, match="no weight update group"):
            llm.destroy_weights_update_group(tr.group)
    finally:
        for tr in trainers:
            tr.close()
        llm.close()


def test_a_trainer_killed_mid_broadcast_leaves_the_old_weights_and_a_new_group_works(setup):
    s, files, named = setup, setup["files"], setup["named"]
    llm = refit.LLM(s["hf"], enable_sleep_mode=True)
    trainers = []
    try:
        group = "weight_update_group"  # SGLang's default name, used by default on every call below
        tr = Trainer(group, s["work"])
        trainers.append(tr)
        llm.init_weights_update_group("127.0.0.1", tr.port, 1, 2, timeout=60)
        assert tr.line() == "ready"
        v0 = llm.weight_version
        tr.broadcast(files["new"], kill_after=3)  # SIGKILLed after 3 of its broadcasts
        with pytest.raises(refit.Error) as e:
            llm.update_weights_from_distributed(*meta(named["new"]))
        message = str(e.value)
        print(f"trainer killed: {message}")
        assert "unchanged" in message and "broken" in message and "init_weights_update_group" in message, message
        tr.proc.wait(timeout=30)
        assert llm.weight_version == v0 and outputs(llm) == s["fresh_old"]
        with pytest.raises(refit.Error, match="broken"):  # the group refuses until joined again
            llm.update_weights_from_distributed(*meta(named["new"]))

        # A new trainer, the same group name: init replaces the broken group.
        tr2 = Trainer(group, s["work"])
        trainers.append(tr2)
        llm.init_weights_update_group("127.0.0.1", tr2.port, 1, 2, group, "gloo", timeout=60)
        assert tr2.line() == "ready"
        tr2.broadcast(files["new"])
        assert llm.update_weights_from_distributed(*meta(named["new"]), mode="abort") == llm.weight_version > v0
        assert tr2.line() == "ok" and outputs(llm) == s["fresh_new"]

        # sleep(level=2) releases the weights: every submission is refused — refit.LLM's and
        # the Scheduler's own admission check alike — until a sync sends them all again.
        assert llm.sleep(level=2) > 0
        llm.wake_up()
        with pytest.raises(ValueError, match=r"released by sleep\(level=2\).*update_weights_from_distributed"):
            llm.generate({"prompt_token_ids": PROMPTS[0]}, PARAMS, use_tqdm=False)
        with pytest.raises(ValueError, match=r"^submit: \d+ weights were released by sleep\(level=2\)"):
            llm.scheduler.submit(PROMPTS[0], {"max_tokens": 2})
        tr2.broadcast(files["new"], bucket=True)
        engine = refit.AsyncLLMEngine.from_llm(llm)  # the async form, off the event loop
        try:
            asyncio.run(engine.update_weights_from_distributed(*meta(named["new"]), load_format="flattened_bucket"))
        finally:
            engine.shutdown()
        assert tr2.line() == "ok" and outputs(llm) == s["fresh_new"]

        # An update that cannot be received (its lists disagree) leaves the group: the
        # trainer's broadcasts could only be paired with the wrong tensors.
        names, dtypes, shapes = meta(named["new"])
        with pytest.raises(ValueError, match="left group 'weight_update_group'"):
            llm.update_weights_from_distributed(names, dtypes[:1], shapes)
        with pytest.raises(refit.Error, match="no weight update group"):
            llm.update_weights_from_distributed(names, dtypes, shapes)
        assert outputs(llm) == s["fresh_new"]
    finally:
        for tr in trainers:
            if tr.proc.poll() is None:
                tr.proc.kill()
            tr.close()
        llm.close()


def test_refusals_name_what_was_wrong(setup):
    llm = refit.LLM(setup["hf"])
    try:
        with pytest.raises(ValueError, match="nccl.*gloo"):
            llm.init_weights_update_group("127.0.0.1", free_port(), 1, 2, backend="nccl")
        with pytest.raises(ValueError, match="use_ray"):
            llm.init_process_group("127.0.0.1", free_port(), 1, 2, "g", backend="gloo", use_ray=True)
        with pytest.raises(ValueError, match="rank_offset 2 does not fit"):
            llm.init_weights_update_group("127.0.0.1", free_port(), 2, 2)
        with pytest.raises(refit.Error, match="no weight update group 'nope'"):
            llm.update_weights_from_distributed([Q], ["float32"], [[64, 64]], group_name="nope")
        with pytest.raises(ValueError, match="unknown dtype 'float99'"):
            llm.update_weights_from_distributed([Q], ["float99"], [[64, 64]])
        with pytest.raises(ValueError, match="load_format"):
            llm.update_weights_from_distributed([Q], ["float32"], [[64, 64]], load_format="safetensors")
        with pytest.raises(ValueError, match="not supported by refit"):
            llm.collective_rpc("execute_model")
        # An unreachable master fails within the timeout, naming the group.
        with pytest.raises(refit.Error, match="failed to join group 'u'"):
            llm.init_weights_update_group("127.0.0.1", free_port(), 1, 2, group_name="u", timeout=1.5)
        assert outputs(llm) == setup["fresh_old"]
    finally:
        llm.close()
