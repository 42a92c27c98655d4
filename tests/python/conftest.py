"""Shared fixtures for the refit Python tests.

CTest runs these with PYTHONPATH=<build>/python (python/CMakeLists.txt). Run by hand:
    PYTHONPATH=build-<name>/python /usr/bin/python3 -m pytest tests/python
"""
import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("REFIT_SHARED_DIR", REPO.parent / "shared"))

# Import from the build tree when PYTHONPATH does not say where the module is.
try:
    import refit  # noqa: F401
except ImportError:
    for candidate in sorted(REPO.glob("build*/python")):
        if (candidate / "refit" / "__init__.py").exists() and list((candidate / "refit").glob("_refit*.so")):
            sys.path.insert(0, str(candidate))
            break

import refit  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

STORIES_HF = SHARED / "oracle" / "stories260K" / "hf"
QWEN2_GGUF = SHARED / "oracle" / "llamacpp" / "qwen2-f32" / "micro-qwen2-f32-s1.gguf"

# refit dtype name -> torch dtype, for the dtypes PyTorch 1.13 can represent.
TORCH_DTYPES = {
    "f32": torch.float32,
    "f64": torch.float64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i8": torch.int8,
    "u8": torch.uint8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "boolean": torch.bool,
}


def require(path):
    if not path.exists():
        pytest.skip(f"oracle file missing: {path}")
    return path


@pytest.fixture
def stories():
    """A fresh engine on the stories260K Hugging Face folder (f32, tied embeddings)."""
    return refit.Engine(str(require(STORIES_HF)))


@pytest.fixture
def qwen2():
    """A fresh engine on the micro Qwen2 GGUF (q/k/v biases, a byte-level BPE tokenizer)."""
    return refit.Engine(str(require(QWEN2_GGUF)))
