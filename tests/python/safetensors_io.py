"""A tiny safetensors reader and writer (the format: an 8-byte little-endian header
length, a JSON header of {name: {dtype, shape, data_offsets}}, then the raw bytes), so
the tests build checkpoints without the safetensors package."""
import json
import struct

import torch

_CODES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
_DTYPES = {code: dtype for dtype, code in _CODES.items()}


def save(tensors, path):
    """Writes {name: tensor} (any strides, detached or not) to `path`."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def load(path):
    """Reads a safetensors file into {name: tensor} (copies)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[8 + n + begin : 8 + n + end])
        out[name] = torch.frombuffer(raw, dtype=_DTYPES[info["dtype"]]).reshape(info["shape"]).clone()
    return out
