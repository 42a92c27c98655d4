"""Law L1, outward: every tensor the engine owns reaches PyTorch through DLPack,
zero-copy, without seed 000's BufferError."""
import ctypes
import gc

import numpy as np
import pytest
import refit
import torch
from conftest import TORCH_DTYPES

UNREPRESENTABLE_IN_TORCH = {"f8_e4m3fn", "f8_e5m2", "f4_e2m1", "e8m0"}


def check_every_parameter_exports(engine):
    params = engine.named_parameters()
    assert params, "the engine reported no parameters"
    names = [name for name, _ in params]
    assert len(names) == len(set(names))
    for name, p in params:
        assert isinstance(p, refit.ParameterTensor)
        assert p.name == name
        assert p.read_only, f"{name}: the engine forbids outside writes, so the export is read-only"
        if p.dtype in UNREPRESENTABLE_IN_TORCH and not hasattr(torch, "float8_e4m3fn"):
            check_refused_with_byte_view(p)
            continue
        t = torch.from_dlpack(p)
        assert t.data_ptr() == p.data_ptr(), f"{name}: torch sees a copy, not the engine's memory"
        assert t.requires_grad is False, name
        assert t.dtype == TORCH_DTYPES[p.dtype], name
        assert tuple(t.shape) == p.shape, name
        assert tuple(t.stride()) == p.strides, name
        assert t.device.type == "cpu"
        assert p.logical_dtype in TORCH_DTYPES or p.logical_dtype in UNREPRESENTABLE_IN_TORCH
        assert len(p.checkpoint_names) >= 1
        assert p.sharding
        # Exporting twice gives two views of the same memory, not two copies.
        assert torch.from_dlpack(p).data_ptr() == t.data_ptr()
    return dict(params)


def check_refused_with_byte_view(p):
    with pytest.raises(refit.ExportError, match="as_bytes"):
        torch.from_dlpack(p)
    raw = torch.from_dlpack(p.as_bytes())
    assert raw.dtype == torch.uint8 and raw.numel() == p.nbytes
    assert raw.data_ptr() == p.data_ptr()


def test_every_stories_parameter_is_a_zero_copy_torch_view(stories):
    params = check_every_parameter_exports(stories)
    assert "model.embed_tokens.weight" in params
    fused = params["model.layers.0.self_attn.qkv_proj.weight"]
    assert fused.checkpoint_names == [
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
    ]
    assert fused.logical_shape == (128, 64) and fused.transforms == []


def test_qwen2_biases_export_like_weights(qwen2):
    # Seed 000: biases were the tensors that could not cross DLPack. Here they are
    # parameters like any other.
    params = check_every_parameter_exports(qwen2)
    biases = [name for name in params if name.endswith(".bias")]
    assert len(biases) == qwen2.config["num_hidden_layers"], biases
    for name in biases:
        b = torch.from_dlpack(params[name])
        assert b.requires_grad is False and b.dim() == 1
        assert b.abs().sum() > 0, f"{name}: the bias was not loaded"
        assert any(n.endswith("q_proj.bias") for n in params[name].checkpoint_names)


def test_torch_view_sees_engine_memory_and_outlives_the_engine(stories):
    name, p = stories.named_parameters()[1]
    t = torch.from_dlpack(p)
    before = t.clone()
    del p
    del stories
    gc.collect()
    # The DLPack export holds the storage: the view stays valid after the engine is gone.
    assert torch.equal(t, before)


def test_numpy_from_dlpack_shares_memory(stories):
    _, p = stories.named_parameters()[0]
    a = np.from_dlpack(p)
    assert a.ctypes.data == p.data_ptr()
    assert a.shape == p.shape and a.dtype == np.float32


def _capsule_pointer(capsule, name):
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, name)


def test_versioned_export_carries_the_read_only_flag(stories):
    _, p = stories.named_parameters()[0]
    capsule = p.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(capsule)
    # DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter, then uint64 flags.
    address = _capsule_pointer(capsule, b"dltensor_versioned")
    flags = ctypes.c_uint64.from_address(address + 24).value
    assert flags & 1, "DLPACK_FLAG_BITMASK_READ_ONLY is not set"
    data = ctypes.c_void_p.from_address(address + 32).value
    assert data == p.data_ptr()
    del capsule  # unconsumed: its destructor frees the export (no leak, no double free)
    legacy = p.__dlpack__()
    assert "dltensor" in repr(legacy) and "versioned" not in repr(legacy)


def test_copy_true_exports_a_private_copy(stories):
    _, p = stories.named_parameters()[0]
    capsule = p.__dlpack__(max_version=(1, 0), copy=True)
    address = _capsule_pointer(capsule, b"dltensor_versioned")
    flags = ctypes.c_uint64.from_address(address + 24).value
    assert flags & 2 and not flags & 1  # IS_COPIED, writable
    assert ctypes.c_void_p.from_address(address + 32).value != p.data_ptr()


def test_dlpack_to_another_device_is_refused(stories):
    _, p = stories.named_parameters()[0]
    assert p.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError, match="cpu"):
        p.__dlpack__(dl_device=(2, 0))


@pytest.mark.parametrize("dtype,nbytes", [("f8_e4m3fn", 32), ("f8_e5m2", 32), ("e8m0", 32), ("f4_e2m1", 16)])
def test_float8_and_float4_are_refused_for_torch_1_13_with_a_byte_view(dtype, nbytes):
    t = refit.zeros([4, 8], dtype)
    assert t.dtype == dtype and t.nbytes == nbytes
    if hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has float8 dtypes")
    with pytest.raises(refit.ExportError, match=r"pre-1\.0 DLPack.*as_bytes") as info:
        torch.from_dlpack(t)
    assert isinstance(info.value, BufferError) and isinstance(info.value, refit.Error)
    raw = torch.from_dlpack(t.as_bytes())
    assert raw.dtype == torch.uint8 and raw.shape == (nbytes,)
    assert raw.data_ptr() == t.data_ptr()
    # The versioned protocol can name them (for DLPack >= 1.0 consumers).
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 1)))


def test_logits_are_a_torch_tensor_and_numpy_on_request(stories):
    ids = [1, 403, 407, 261]
    logits = stories.logits(ids)
    assert isinstance(logits, torch.Tensor) and logits.shape == (4, 512) and logits.dtype == torch.float32
    as_numpy = stories.logits(ids, format="numpy")
    assert isinstance(as_numpy, np.ndarray)
    assert np.array_equal(as_numpy, logits.numpy())
    as_refit = stories.logits(ids, format="refit")
    assert isinstance(as_refit, refit.Tensor) and as_refit.shape == (4, 512)
    with pytest.raises(ValueError, match="format"):
        stories.logits(ids, format="jax")
