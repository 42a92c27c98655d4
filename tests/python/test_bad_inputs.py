"""Refusals: every bad input raises a Python exception naming the parameter and the
problem, and the engine keeps generating on its old weights, bit for bit."""
import numpy as np
import pytest
import refit
import safetensors_io
import torch
from conftest import STORIES_HF

PROMPT = [1, 403, 407, 261]
NORM = "model.norm.weight"
Q = "model.layers.0.self_attn.q_proj.weight"


class FakeCudaTensor:
    """What a CUDA tensor looks like to DLPack (torch here is CPU-only)."""

    exported = False

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0

    def __dlpack__(self, stream=None, **kwargs):
        FakeCudaTensor.exported = True
        raise AssertionError("refit must refuse before asking for the memory")


@pytest.fixture
def snapshot(stories):
    """The engine's state before a bad input: stored bytes, version, greedy tokens."""
    return {
        "bytes": {n: torch.from_dlpack(p).clone() for n, p in stories.named_parameters()},
        "version": stories.weight_version,
        "ids": stories.generate(PROMPT, max_tokens=16).ids,
    }


def assert_unchanged(engine, snapshot):
    assert engine.weight_version == snapshot["version"]
    for name, p in engine.named_parameters():
        assert torch.equal(torch.from_dlpack(p), snapshot["bytes"][name]), f"{name} changed"
    out = engine.generate(PROMPT, max_tokens=16)
    assert out.ids == snapshot["ids"] and out.weight_version == snapshot["version"]


def good(name=NORM):
    shape = {NORM: (64,), Q: (64, 64)}[name]
    return torch.full(shape, 0.5, requires_grad=True)


BAD_INPUTS = [
    # (description, name, tensor factory, exception, message fragments)
    ("wrong shape", Q, lambda: torch.zeros(64, 63, requires_grad=True), refit.UpdateError, [Q, "[64, 64]", "[64, 63]"]),
    ("transposed shape", "model.layers.0.mlp.down_proj.weight", lambda: torch.zeros(64, 172).t(), refit.UpdateError,
     ["down_proj", "[172, 64]"]),
    ("unknown name", "model.layers.9.self_attn.q_proj.weight", lambda: torch.zeros(64, 64), refit.UpdateError,
     ["model.layers.9.self_attn.q_proj.weight", "unknown"]),
    ("fused name is not a checkpoint name", "model.layers.0.self_attn.qkv_proj.weight", lambda: torch.zeros(128, 64),
     refit.UpdateError, ["qkv_proj", "unknown"]),
    ("integer dtype", NORM, lambda: torch.ones(64, dtype=torch.int32), refit.UpdateError, [NORM, "i32"]),
    ("i64 dtype", NORM, lambda: torch.ones(64, dtype=torch.int64), refit.UpdateError, [NORM, "i64"]),
    ("bool dtype (torch 1.13 cannot export it)", NORM, lambda: torch.ones(64, dtype=torch.bool), TypeError, [NORM, "Bool"]),
    ("complex dtype", NORM, lambda: torch.ones(64, dtype=torch.complex64), TypeError, [NORM]),
    ("a CUDA tensor on a CPU-only build", NORM, FakeCudaTensor, ValueError, [NORM, "cuda:0", "send a CPU tensor"]),
    ("a meta tensor", NORM, lambda: torch.empty(64, device="meta"), ValueError, [NORM, "meta"]),
    ("a list", NORM, lambda: [0.5] * 64, TypeError, [NORM, "list"]),
    ("None", NORM, lambda: None, TypeError, [NORM, "NoneType"]),
    ("a sparse tensor", NORM, lambda: torch.ones(64).to_sparse(), TypeError, [NORM, "sparse"]),
]


@pytest.mark.parametrize("what,name,make,error,fragments", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_tensor_is_refused_and_nothing_changes(stories, snapshot, what, name, make, error, fragments):
    # Alone, and after a good tensor in the same call: the good one must not land either.
    for tensors in ([(name, make())], [(NORM, good()), (name, make())]):
        with pytest.raises(error) as info:
            stories.update_weights_from_tensors(tensors)
        for fragment in fragments:
            assert fragment in str(info.value), f"{what}: '{fragment}' missing from: {info.value}"
        assert_unchanged(stories, snapshot)
    assert not FakeCudaTensor.exported


@pytest.mark.parametrize("what,name,make,error,fragments", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_tensor_fails_the_transaction(stories, snapshot, what, name, make, error, fragments):
    update = stories.begin_update()
    update.update(Q, good(Q))
    with pytest.raises(error):
        update.update(name, make())
    assert update.failed and name in update.failure
    with pytest.raises(refit.UpdateError, match="refusing to commit"):
        update.commit()
    update.abort()
    assert_unchanged(stories, snapshot)


def test_update_errors_are_value_errors_and_refit_errors(stories):
    with pytest.raises(ValueError):
        stories.update_weights_from_tensors([(Q, torch.zeros(3))])
    with pytest.raises(refit.Error):
        stories.update_weights_from_tensors([(Q, torch.zeros(3))])


def test_non_finite_values_are_refused_by_default(stories, snapshot):
    bad = good()
    with torch.no_grad():
        bad[7] = float("nan")
    with pytest.raises(refit.UpdateError, match=r"model.norm.weight.*element \[7\] is nan"):
        stories.update_weights_from_tensors([(NORM, bad)])
    assert_unchanged(stories, snapshot)
    with pytest.raises(refit.UpdateError, match=r"element \[7\]"):
        with stories.begin_update() as update:
            update.update(NORM, bad)
    assert_unchanged(stories, snapshot)
    stories.update_weights_from_tensors([(NORM, bad)], check_finite=False)  # the trainer's call
    assert stories.weight_version == snapshot["version"] + 1
    report = stories.last_update_report()
    assert report["tensor_names"] == [NORM] and report["check_finite"] is False
    assert report["bytes"] == bad.numel() * bad.element_size() and report["parameters_touched"] == 1


def test_unknown_tensors_are_refused_or_listed_as_ignored(stories, snapshot):
    extra = "model.layers.0.mlp.extra_proj.weight"
    with pytest.raises(refit.UpdateError, match="unknown tensor.*ignore_unknown_tensors"):
        stories.update_weights_from_tensors([(NORM, good()), (extra, torch.zeros(2))])
    assert_unchanged(stories, snapshot)
    stories.update_weights_from_tensors([(NORM, good()), (extra, torch.zeros(2))], ignore_unknown_tensors=True)
    assert stories.last_update_report()["ignored"] == [extra]


def test_exception_inside_the_with_block_aborts(stories, snapshot):
    with pytest.raises(RuntimeError, match="trainer crashed"):
        with stories.begin_update() as update:
            update.update(NORM, good())
            raise RuntimeError("trainer crashed")
    assert update.finished
    assert_unchanged(stories, snapshot)


def test_finished_transaction_refuses_more_work(stories):
    update = stories.begin_update()
    update.update(NORM, good())
    assert update.commit() == 2
    for call in (lambda: update.update(NORM, good()), update.commit, update.abort):
        with pytest.raises(refit.UpdateError, match="already been committed or aborted"):
            call()


def test_update_from_disk_refusals_leave_the_engine_unchanged(stories, snapshot, tmp_path):
    with pytest.raises(refit.Error, match="does-not-exist"):
        stories.update_weights_from_disk(tmp_path / "does-not-exist")
    assert_unchanged(stories, snapshot)
    with pytest.raises(refit.UpdateError, match="model.layers.7.mlp.up_proj.weight"):
        stories.update_weights_from_disk(STORIES_HF, names=["model.norm.weight", "model.layers.7.mlp.up_proj.weight"])
    assert_unchanged(stories, snapshot)
    # A checkpoint missing one tensor: a full update refuses, naming it.
    weights = safetensors_io.load(STORIES_HF / "model.safetensors")
    del weights["model.layers.3.mlp.gate_proj.weight"]
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "config.json").write_bytes((STORIES_HF / "config.json").read_bytes())
    safetensors_io.save({n: t * 3 for n, t in weights.items()}, tmp_path / "partial" / "model.safetensors")
    with pytest.raises(refit.Error, match="model.layers.3.mlp.gate_proj.weight"):
        stories.update_weights_from_disk(tmp_path / "partial")
    assert_unchanged(stories, snapshot)


def test_capsules_and_numpy_are_accepted_once(stories):
    capsule = torch.utils.dlpack.to_dlpack(torch.full((64,), 0.25))
    stories.update_weights_from_tensors([(NORM, capsule)])
    with pytest.raises(ValueError, match="already consumed"):
        stories.update_weights_from_tensors([(NORM, capsule)])
    stories.update_weights_from_tensors({NORM: np.full(64, 0.75, dtype=np.float32)})
    norm = dict(stories.named_parameters())[NORM]
    assert torch.equal(torch.from_dlpack(norm), torch.full((64,), 0.75))


def test_seed_000_torch_refuses_what_refit_accepts(stories):
    bias_like = torch.nn.Parameter(torch.full((64,), 2.0))
    with pytest.raises(RuntimeError, match="require gradient"):
        bias_like.__dlpack__()  # PyTorch 1.13's refusal (BufferError in later versions)
    stories.update_weights_from_tensors([(NORM, bias_like)])
    assert bias_like.requires_grad  # refit detached its own view, not the trainer's tensor
    assert torch.equal(torch.from_dlpack(dict(stories.named_parameters())[NORM]), bias_like.detach())


def test_generate_refuses_bad_prompts(stories):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        stories.generate([1, 512])
    with pytest.raises(ValueError, match="no tokenizer"):
        stories.generate("Once upon a time")
    with pytest.raises(ValueError, match="no tokens"):
        stories.generate([])
    with pytest.raises(TypeError):
        stories.generate(3.5)
    with pytest.raises(ValueError, match="top_p"):
        stories.generate([1], temperature=1.0, top_p=2.0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        stories.logits([-1])


ACCEPTED = [
    ("a slice with an offset and a stride", lambda: torch.arange(300, dtype=torch.float32)[3:131:2] / 100),
    ("a stride-0 expanded scalar", lambda: torch.tensor(0.5).expand(64)),
    ("a column of a matrix", lambda: torch.linspace(0, 1, 64 * 3).view(64, 3)[:, 1]),
    ("f64", lambda: torch.linspace(-1, 1, 64, dtype=torch.float64)),
    ("bf16 requiring grad", lambda: torch.linspace(-1, 1, 64).to(torch.bfloat16).requires_grad_()),
    ("a non-leaf tensor with a graph", lambda: torch.ones(64, requires_grad=True) * 0.25),
]


@pytest.mark.parametrize("what,make", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_what_trainers_send_is_accepted_and_converted(stories, what, make):
    sent = make()
    stories.update_weights_from_tensors([(NORM, sent)])
    stored = torch.from_dlpack(dict(stories.named_parameters())[NORM])
    assert torch.equal(stored, sent.detach().to(torch.float32)), what
