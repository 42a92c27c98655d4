#!/usr/bin/python3
"""A torch.distributed trainer (torch 1.13, gloo) for weight_sync_test.py: it creates the
weight-update group exactly as SGLang's init_custom_process_group does (rendezvous on
tcp://host:port, the TCPStore hosted here as rank 0, PrefixStore(group_name), then
_new_process_group_helper), and then, for each line of JSON on stdin, broadcasts tensors
as slime/AReaL do:

  {"op": "broadcast", "file": "x.pt", "bucket": false, "kill_after": null}
      torch.load(file) is [(name, tensor)]: one dist.broadcast(t, src=0) per tensor (async
      handles, then wait, as slime), or with bucket one broadcast of the flattened bytes
      (SGLang's FlattenedTensorBucket); kill_after=k SIGKILLs this process after k broadcasts
  {"op": "exit"}

It prints "started" once torch is imported (the group's rendezvous comes next), "ready"
once the group exists and "ok" after each command.
usage: weight_sync_trainer.py HOST PORT WORLD_SIZE GROUP_NAME [plain]
  plain: _new_process_group_helper on the bare store (no outer PrefixStore)
"""
import json
import os
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

print("started", flush=True)


def init_custom_process_group(backend, init_method, timeout, world_size, rank, group_name, outer_prefix=True):
    from torch.distributed import distributed_c10d as c10d

    rendezvous_iterator = c10d.rendezvous(init_method, rank, world_size, timeout=timeout)
    store, rank, world_size = next(rendezvous_iterator)
    store.set_timeout(timeout)
    if outer_prefix:  # SGLang's helper; without it the group's keys have one prefix
        store = c10d.PrefixStore(group_name, store)
    pg = c10d._new_process_group_helper(world_size, rank, [], c10d.Backend(backend), store, pg_options=None,
                                        group_name=group_name, timeout=timeout)
    if isinstance(pg, tuple):  # torch >= 2 returns (pg, prefix_store)
        pg = pg[0]
    ranks = {i: i for i in range(world_size)}
    if hasattr(c10d, "_world"):
        c10d._world.pg_group_ranks[pg] = ranks
    else:
        c10d._pg_group_ranks[pg] = ranks
    return pg


def main():
    host, port, world_size, group_name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    outer = not (len(sys.argv) > 5 and sys.argv[5] == "plain")
    group = init_custom_process_group("gloo", f"tcp://{host}:{port}", timedelta(seconds=60), world_size, 0, group_name,
                                      outer)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "exit":
            break
        named = torch.load(cmd["file"])
        tensors = [t.contiguous() for _, t in named]
        if cmd.get("bucket"):
            tensors = [torch.cat([t.flatten().view(torch.uint8) for t in tensors])]
        kill_after = cmd.get("kill_after")
        handles = []
        for i, t in enumerate(tensors):
            if kill_after is not None and i == kill_after:
                for h in handles:
                    h.wait()
                os.kill(os.getpid(), signal.SIGKILL)
            handles.append(dist.broadcast(t, src=0, group=group, async_op=True))
        for h in handles:
            h.wait()
        print("ok", flush=True)


if __name__ == "__main__":
    main()
