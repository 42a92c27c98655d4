"""The RL loop of issue 7: the engine generates, a trainer perturbs every weight in torch
(tensors that require grad) and pushes them; the engine then behaves exactly like a fresh
engine loaded from the same tensors saved to safetensors, and no storage moved."""
import shutil

import pytest

import refit
import safetensors_io
import torch
from conftest import STORIES_HF, require

PROMPT = [1, 403, 407, 261, 378]


def storage_pointers(engine):
    return {name: p.data_ptr() for name, p in engine.named_parameters()}


def stored_bytes(engine):
    return {name: torch.from_dlpack(p).clone() for name, p in engine.named_parameters()}


def fresh_engine_from(weights, folder):
    folder.mkdir(exist_ok=True)
    shutil.copy(STORIES_HF / "config.json", folder / "config.json")
    safetensors_io.save(weights, folder / "model.safetensors")
    return refit.Engine(str(folder))


def test_trainer_copy_starts_equal_to_the_engine(stories):
    # The trainer reads the same checkpoint; the engine's stored tensors are those
    # tensors (fused q/k/v and gate/up concatenated along rows, as the metadata says).
    trainer = safetensors_io.load(require(STORIES_HF) / "model.safetensors")
    for name, p in stories.named_parameters():
        stored = torch.from_dlpack(p)
        assert p.transforms == []
        expected = torch.cat([trainer[n] for n in p.checkpoint_names])
        assert tuple(expected.shape) == p.logical_shape
        assert torch.equal(stored, expected), name


def test_rl_loop_refit_equals_fresh_engine_three_times(stories, tmp_path):
    engine = stories
    pointers = storage_pointers(engine)
    base = safetensors_io.load(require(STORIES_HF) / "model.safetensors")
    # The trainer's policy: nn.Parameters, requires_grad=True, as an optimizer holds them.
    policy = {name: torch.nn.Parameter(t.clone()) for name, t in base.items()}
    generator = torch.Generator().manual_seed(1234)
    previous_ids = engine.generate(PROMPT, max_tokens=24).ids
    for step in range(3):
        out = engine.generate(PROMPT, max_tokens=24)
        assert out.weight_version == step + 1
        assert out.ids == previous_ids  # nothing changed since the last refit
        # "Training": an in-place step on every weight, autograd still attached.
        loss = sum((p * p).sum() for p in policy.values()) * 1e-3
        loss.backward()
        with torch.no_grad():
            for p in policy.values():
                p -= 0.05 * torch.randn(p.shape, generator=generator) + p.grad
                p.grad = None
        assert all(p.requires_grad for p in policy.values())
        # What trainers send, varied per round: parameters as they are, non-contiguous
        # views, and a dict.
        if step == 0:
            version = engine.update_weights_from_tensors(list(policy.items()))
        elif step == 1:
            views = [(n, p.t().contiguous().t() if p.dim() == 2 else p) for n, p in policy.items()]
            assert any(not v.is_contiguous() for _, v in views)
            version = engine.update_weights_from_tensors(views)
        else:
            version = engine.update_weights_from_tensors(policy)
        assert version == step + 2 and engine.weight_version == step + 2

        fresh = fresh_engine_from(policy, tmp_path / f"step{step}")
        probe = PROMPT + list(range(20, 60))
        assert torch.equal(engine.logits(probe), fresh.logits(probe)), f"step {step}: logits differ"
        ours, theirs = stored_bytes(engine), stored_bytes(fresh)
        for name in ours:
            assert torch.equal(ours[name], theirs[name]), f"step {step}: {name} differs"
        out = engine.generate(PROMPT, max_tokens=24)
        assert out.ids == fresh.generate(PROMPT, max_tokens=24).ids
        assert out.weight_version == step + 2
        previous_ids = out.ids
        assert storage_pointers(engine) == pointers, "a parameter's storage moved"


def test_bf16_and_f16_updates_convert_like_a_checkpoint(stories, tmp_path):
    base = safetensors_io.load(require(STORIES_HF) / "model.safetensors")
    for dtype in (torch.bfloat16, torch.float16):
        sent = {n: (t * 1.01).to(dtype).requires_grad_() for n, t in base.items()}
        stories.update_weights_from_tensors(sent)
        fresh = fresh_engine_from(sent, tmp_path / str(dtype).split(".")[-1])
        for (name, ours), (_, theirs) in zip(stories.named_parameters(), fresh.named_parameters()):
            assert torch.equal(torch.from_dlpack(ours), torch.from_dlpack(theirs)), name
        probe = [1, 2, 3, 4, 5]
        assert torch.equal(stories.logits(probe), fresh.logits(probe))


def test_torch_views_see_each_refit(stories):
    # Zero-copy both ways: a torch view taken before an update shows the new weights.
    name, p = next((n, p) for n, p in stories.named_parameters() if n == "model.norm.weight")
    view = torch.from_dlpack(p)
    new = torch.linspace(0.5, 1.5, view.numel(), requires_grad=True)
    stories.update_weights_from_tensors([(name, new)])
    assert torch.equal(view, new.detach())


def test_update_from_disk_all_and_named(stories, tmp_path):
    base = safetensors_io.load(require(STORIES_HF) / "model.safetensors")
    target = {n: t + 0.25 for n, t in base.items()}
    fresh = fresh_engine_from(target, tmp_path / "target")
    assert stories.update_weights_from_disk(tmp_path / "target") == 2
    assert torch.equal(stories.logits([1, 2, 3]), fresh.logits([1, 2, 3]))
    # A subset, by name: only that tensor changes.
    before = stored_bytes(stories)
    names = ["model.layers.2.mlp.down_proj.weight"]
    safetensors_io.save({**target, names[0]: target[names[0]] * 2}, tmp_path / "target" / "model.safetensors")
    assert stories.update_weights_from_disk(str(tmp_path / "target"), names=names) == 3
    after = stored_bytes(stories)
    for name in after:
        if name == names[0]:
            assert torch.equal(after[name], target[names[0]] * 2)
        else:
            assert torch.equal(after[name], before[name]), name


def test_transaction_commits_a_subset_in_any_order(stories):
    base = safetensors_io.load(require(STORIES_HF) / "model.safetensors")
    names = ["model.layers.1.self_attn.v_proj.weight", "model.layers.0.mlp.up_proj.weight", "model.norm.weight"]
    with stories.begin_update() as update:
        for n in names:
            update.update(n, torch.nn.Parameter(base[n] * 0.5))
        assert len(update) == 3 and not update.failed
    assert update.finished and stories.weight_version == 2
    params = dict(stories.named_parameters())
    assert torch.equal(torch.from_dlpack(params["model.norm.weight"]), base["model.norm.weight"] * 0.5)
    v = torch.from_dlpack(params["model.layers.1.self_attn.qkv_proj.weight"])
    assert torch.equal(v[96:128], base[names[0]] * 0.5)  # rows of v in the fused q/k/v
    assert torch.equal(v[0:96], torch.cat([base["model.layers.1.self_attn.q_proj.weight"],
                                           base["model.layers.1.self_attn.k_proj.weight"]]))


@pytest.mark.parametrize("layout", [None, "transpose", "shuffle16x16"])
def test_state_dict_and_refit_under_each_layout(layout, tmp_path):
    """The metadata beside each parameter is true: state_dict() rebuilds the checkpoint
    exactly from the stored (transposed / tile-shuffled) tensors, and a refit under the
    layout equals a fresh engine with that layout."""
    engine = refit.Engine(str(require(STORIES_HF)), layout=layout)
    base = safetensors_io.load(STORIES_HF / "model.safetensors")
    params = dict(engine.named_parameters())
    transformed = [n for n, p in params.items() if p.transforms]
    if layout:
        assert transformed, f"no parameter took the {layout} layout"
        assert all(p.transforms == [layout.replace("16x16", "_16x16")] for n, p in params.items() if p.transforms)
    sd = engine.state_dict()
    assert set(sd) == set(base)
    for name, t in sd.items():
        assert torch.equal(t, base[name]), name
        assert not t.requires_grad
    if layout != "shuffle16x16":  # plain and transposed: views of the engine's memory
        for p in params.values():
            for shard in p.shards:
                assert sd[shard["checkpoint_name"]].data_ptr() >= p.data_ptr()
                assert sd[shard["checkpoint_name"]].data_ptr() < p.data_ptr() + p.nbytes

    pointers = storage_pointers(engine)
    policy = {n: torch.nn.Parameter(t.clone()) for n, t in sd.items()}
    for step in range(3):
        with torch.no_grad():
            for p in policy.values():
                p.mul_(1.0 + 0.01 * (step + 1))
        engine.update_weights_from_tensors(policy)
        folder = tmp_path / f"{layout}-{step}"
        fresh_engine_from(policy, folder)
        fresh = refit.Engine(str(folder), layout=layout)
        assert torch.equal(engine.logits(PROMPT), fresh.logits(PROMPT))
        for (name, ours), (_, theirs) in zip(engine.named_parameters(), fresh.named_parameters()):
            assert torch.equal(torch.from_dlpack(ours), torch.from_dlpack(theirs)), name
        assert storage_pointers(engine) == pointers
        for name, t in engine.state_dict().items():
            assert torch.equal(t, policy[name].detach()), name


@pytest.mark.parametrize("layout", [None, "transpose"])
def test_pushing_the_engines_own_views_back_is_exact(layout):
    # The sources alias the destinations (zero-copy views of the same storage): each
    # tensor is staged before it is written, so the identity update changes nothing.
    engine = refit.Engine(str(require(STORIES_HF)), layout=layout)
    before = stored_bytes(engine)
    assert engine.update_weights_from_tensors(engine.state_dict()) == 2
    for name, t in stored_bytes(engine).items():
        assert torch.equal(t, before[name]), name
