"""The RL loop at tensor-parallel size 2: `mpirun -np 2 python3 ...`, one rank per
process, each holding its shard; pushes of full checkpoint tensors land exactly."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import refit
import safetensors_io
import torch
from conftest import STORIES_HF, require

WORKER = pathlib.Path(__file__).resolve().parent / "mpi_rl_worker.py"


def test_tp2_rl_loop_matches_fresh_engines_and_tp1(stories, tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    base = safetensors_io.load(require(STORIES_HF) / "model.safetensors")
    steps = []
    for step in range(3):
        folder = tmp_path / f"step{step}"
        folder.mkdir()
        shutil.copy(STORIES_HF / "config.json", folder / "config.json")
        g = torch.Generator().manual_seed(step)
        safetensors_io.save({n: t + 0.02 * torch.randn(t.shape, generator=g) for n, t in base.items()},
                            folder / "model.safetensors")
        steps.append(str(folder))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = ["mpirun", "--oversubscribe", "-np", "2", sys.executable, str(WORKER), str(STORIES_HF),
           str(tmp_path / "report")] + steps
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if run.returncode != 0 and "no MPI" in run.stderr + run.stdout:
        pytest.skip("this build has no MPI")
    assert run.returncode == 0, run.stdout + run.stderr
    reports = [json.loads((tmp_path / f"report.rank{r}.json").read_text()) for r in range(2)]
    tp1_ids = stories.generate([1, 403, 407], max_tokens=16).ids
    for r, report in enumerate(reports):
        assert report["rank"] == r and report["world"] == 2
        assert report["sharded"], "tp=2 sharded nothing"
        assert report["ids"] == tp1_ids, f"rank {r}: tp=2 greedy tokens differ from tp=1"
        for step, s in enumerate(report["steps"]):
            assert s["version"] == step + 2
            assert s["same_logits"] and s["same_bytes"] and s["same_ids"], f"rank {r} step {step}: {s}"
            assert s["pointers_unchanged"], f"rank {r} step {step}: a storage moved"
    with pytest.raises(ValueError, match="mpirun -np 2"):
        refit.Engine(str(STORIES_HF), tp=2)  # not launched by mpirun
