"""One rank of the tensor-parallel RL check, run by test_tensor_parallel.py under mpirun.

argv: base model folder, output prefix, then one folder per step holding that step's
trainer weights (written by the test before launch). Each rank loads with tp=2,
generates, and for each step pushes the full checkpoint tensors (as nn.Parameters that
require grad; each rank keeps its shard), then compares with a fresh tp=2 engine loaded
from that folder. Writes its findings to <prefix>.rank<N>.json."""
import json
import pathlib
import sys

import refit
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import safetensors_io  # noqa: E402

base_dir, out_prefix, step_dirs = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
engine = refit.Engine(str(base_dir), tp=2)
report = {"rank": engine.rank, "world": engine.world_size, "ids": engine.generate([1, 403, 407], max_tokens=16).ids}
pointers = {n: p.data_ptr() for n, p in engine.named_parameters()}
report["sharded"] = sorted(n for n, p in engine.named_parameters() if p.shape != p.logical_shape)
report["steps"] = []
probe = [1, 403, 407, 261, 378, 432]
for folder in step_dirs:
    policy = {n: torch.nn.Parameter(t) for n, t in safetensors_io.load(pathlib.Path(folder) / "model.safetensors").items()}
    version = engine.update_weights_from_tensors(list(policy.items()))
    fresh = refit.Engine(folder, tp=2)
    report["steps"].append({
        "version": version,
        "same_logits": torch.equal(engine.logits(probe), fresh.logits(probe)),
        "same_bytes": all(torch.equal(torch.from_dlpack(a), torch.from_dlpack(b))
                          for (_, a), (_, b) in zip(engine.named_parameters(), fresh.named_parameters())),
        "same_ids": engine.generate([1, 403], max_tokens=12).ids == fresh.generate([1, 403], max_tokens=12).ids,
        "pointers_unchanged": {n: p.data_ptr() for n, p in engine.named_parameters()} == pointers,
    })
pathlib.Path(f"{out_prefix}.rank{engine.rank}.json").write_text(json.dumps(report))
