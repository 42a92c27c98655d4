"""Comparing refit's prompt logits with a reference file (the config-field tests).

    run = refit_logits(refit, ckpt, ids, out_path)   # `refit generate --logits`, one token
    rel = relative_error(floats(out_path), floats(ref_path))   # max|got - ref| / max|ref|
"""
import struct
import subprocess


def floats(path):
    """A raw little-endian f32 file."""
    with open(path, "rb") as f:
        data = f.read()
    return struct.unpack(f"<{len(data) // 4}f", data)


def refit_logits(refit, ckpt, ids, out_path):
    """Runs the prompt through refit, writing every position's logits to out_path."""
    return subprocess.run([refit, "generate", "-m", ckpt, "--prompt-ids", " ".join(map(str, ids)), "-n", "1",
                           "--ignore-eos", "-t", "2", "--logits", out_path], capture_output=True, text=True,
                          timeout=600)


def relative_error(got, ref):
    """max|got - ref| / max|ref| over the reference's rows; None when got is shorter."""
    got = got[:len(ref)]
    if len(got) != len(ref):
        return None
    return max(abs(a - b) for a, b in zip(got, ref)) / max(abs(b) for b in ref)
