"""refit's CPU carrier for SGLang's ``/update_weights_from_tensor``, built from torch tensors.

SGLang clients (slime, verl) send ``serialized_named_tensors``: one entry per tensor-parallel
rank, each a ``MultiprocessingSerializer`` pickle of CUDA IPC handles or shared-memory file
descriptors. A CPU engine across HTTP cannot open those, so refit takes the same two layouts
as JSON (``src/server/weight_carrier.h``, ``docs/weight-lifecycle.md``):

* ``load_format="flattened_bucket"``: ``{"flattened_tensor": <base64 bytes> | {"shm": name,
  "offset", "nbytes"}, "metadata": [{name, shape, dtype, start_idx, end_idx, numel}, ...]}``,
  SGLang's ``FlattenedTensorBucket`` layout (tensors as bytes, back to back; indices in bytes);
* ``load_format=None`` (or ``"direct"``): ``[{name, dtype, shape, data: <base64>}, ...]``.

Typical use from a trainer::

    from refit.weight_bucket import flatten_bucket, update_request
    body = update_request([flatten_bucket(model.state_dict().items())], "flattened_bucket",
                          weight_version="step-7")
    requests.post(f"{url}/update_weights_from_tensor", json=body)

or, on the same machine, without base64 (one copy into shared memory, one out of it)::

    carrier, segment = write_shm_bucket(named_tensors)
    requests.post(..., json=update_request([carrier], "flattened_bucket"))
    segment.close(); segment.unlink()   # refit copied the bytes before it replied

Pure Python + torch; imported as ``refit.weight_bucket`` (no compiled module needed).
"""

from __future__ import annotations

import base64
import json
from multiprocessing import shared_memory
from typing import Iterable, Optional, Sequence, Tuple

import torch

__all__ = [
    "dtype_name",
    "tensor_bytes",
    "bucket_layout",
    "flatten_bucket",
    "write_shm_bucket",
    "named_tensors_entry",
    "entry_bytes",
    "update_request",
]


def dtype_name(dtype: torch.dtype) -> str:
    """'float32', 'bfloat16', ... (torch's name without the 'torch.' prefix)."""
    return str(dtype).replace("torch.", "")


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's values as little-endian bytes in row-major order (any dtype, any device;
    requires_grad and non-contiguous views are fine: the values are copied)."""
    t = tensor.detach().to("cpu").contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def _named(named_tensors) -> Sequence[Tuple[str, torch.Tensor]]:
    items = list(named_tensors.items() if hasattr(named_tensors, "items") else named_tensors)
    for name, t in items:
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise TypeError(f"expected (name, torch.Tensor) pairs, got ({type(name).__name__}, {type(t).__name__})")
    return items


def bucket_layout(named_tensors) -> Tuple[list, int]:
    """SGLang's FlattenedTensorBucket metadata for these tensors packed back to back as
    bytes, and the total size in bytes."""
    metadata, offset = [], 0
    for name, t in _named(named_tensors):
        nbytes = t.numel() * t.element_size()
        metadata.append({"name": name, "shape": list(t.shape), "dtype": dtype_name(t.dtype),
                         "start_idx": offset, "end_idx": offset + nbytes, "numel": nbytes})
        offset += nbytes
    return metadata, offset


def flatten_bucket(named_tensors) -> dict:
    """One ``serialized_named_tensors`` entry for ``load_format="flattened_bucket"`` with the
    bytes inline (base64)."""
    items = _named(named_tensors)
    metadata, _ = bucket_layout(items)
    flat = b"".join(tensor_bytes(t) for _, t in items)
    return {"flattened_tensor": base64.b64encode(flat).decode("ascii"), "metadata": metadata}


def write_shm_bucket(named_tensors, name: Optional[str] = None) -> Tuple[dict, shared_memory.SharedMemory]:
    """Packs the tensors into a new POSIX shared-memory segment and returns the entry that
    names it, and the segment. Keep the segment open until refit has replied (it copies the
    bytes out before replying), then ``close()`` and ``unlink()`` it."""
    items = _named(named_tensors)
    metadata, total = bucket_layout(items)
    segment = shared_memory.SharedMemory(name=name, create=True, size=max(total, 1))
    view = segment.buf
    for (_, t), m in zip(items, metadata):
        view[m["start_idx"]:m["end_idx"]] = tensor_bytes(t)
    del view
    carrier = {"flattened_tensor": {"shm": "/dev/shm/" + segment.name.lstrip("/"), "offset": 0, "nbytes": total},
               "metadata": metadata}
    return carrier, segment


def named_tensors_entry(named_tensors) -> list:
    """One ``serialized_named_tensors`` entry for ``load_format=None`` or ``"direct"``."""
    return [{"name": name, "dtype": dtype_name(t.dtype), "shape": list(t.shape),
             "data": base64.b64encode(tensor_bytes(t)).decode("ascii")} for name, t in _named(named_tensors)]


def entry_bytes(entry) -> bytes:
    """An entry as UTF-8 JSON bytes: what to hand a client that base64-encodes each
    serialized entry itself (verl's HttpServerAdapter.update_weights_from_tensor)."""
    return json.dumps(entry, separators=(",", ":")).encode("utf-8")


def update_request(entries: Iterable, load_format: Optional[str] = None, **fields) -> dict:
    """The JSON body of ``/update_weights_from_tensor`` (SGLang's UpdateWeightsFromTensorReqInput):
    ``entries`` (one per rank; refit needs one, identical copies are fine) plus any of
    flush_cache, abort_all_requests, weight_version."""
    body = {"serialized_named_tensors": list(entries), "load_format": load_format}
    body.update(fields)
    return body
