"""Q8_0 codes interleaved for the int8-activation kernel (layout "interleave4x16"; what
"auto" picks on a CPU with AVX-512 VNNI), seen from a trainer: the stored tensor is a
permutation of the plain layout's codes within each row, state_dict() gives them back in
checkpoint order, the logits are the plain layout's bit for bit, and a refit writes the
new codes interleaved in place, equal to a fresh engine's."""

import pytest
import torch

import refit
import safetensors_io
from wide_mlp_llama import PROMPT, write_model


def test_interleaved_codes_export_in_checkpoint_order_and_refit_in_place(tmp_path):
    write_model(tmp_path / "base", seed=1)
    plain = refit.Engine(str(tmp_path / "base"), quant="q8_0-w8a8", layout="plain")
    mixed = refit.Engine(str(tmp_path / "base"), quant="q8_0-w8a8", layout="interleave4x16")
    down = "model.layers.0.mlp.down_proj.weight"
    params = dict(mixed.named_parameters())
    assert params[down].transforms == ["quantize:q8_0-w8a8", "interleave_4x16"]
    assert params[down].layout == "interleaved_4x16"
    stored = torch.from_dlpack(params[down])
    stored_plain = torch.from_dlpack(dict(plain.named_parameters())[down])
    # The same codes, the first run of each row permuted, the tail block in place.
    assert not torch.equal(stored, stored_plain)
    assert torch.equal(stored.sort(dim=1).values, stored_plain.sort(dim=1).values)
    assert torch.equal(stored[:, 512:], stored_plain[:, 512:])
    block, group = 2, 1  # code 32 * block + 4 * group sits at 64 * group + 4 * block
    assert torch.equal(stored[:, 64 * group + 4 * block], stored_plain[:, 32 * block + 4 * group])
    assert torch.equal(mixed.state_dict()[down], plain.state_dict()[down])
    assert torch.equal(mixed.logits(PROMPT), plain.logits(PROMPT))

    # A refit from bf16 re-quantizes and re-interleaves into the same storage: equal to a
    # fresh engine on the new weights.
    pointers = {n: p.data_ptr() for n, p in mixed.named_parameters()}
    new = write_model(tmp_path / "next", seed=2)
    mixed.update_weights_from_tensors({n: t.to(torch.bfloat16) for n, t in new.items()})
    safetensors_io.save({n: t.to(torch.bfloat16).float() for n, t in new.items()}, tmp_path / "next" / "model.safetensors")
    fresh = refit.Engine(str(tmp_path / "next"), quant="q8_0-w8a8", layout="interleave4x16")
    for (name, ours), (_, theirs) in zip(mixed.named_parameters(), fresh.named_parameters()):
        assert torch.equal(torch.from_dlpack(ours), torch.from_dlpack(theirs)), name
    assert torch.equal(mixed.logits(PROMPT), fresh.logits(PROMPT))
    assert {n: p.data_ptr() for n, p in mixed.named_parameters()} == pointers


def test_auto_interleaves_only_where_the_int8_kernel_reads_it(tmp_path):
    write_model(tmp_path / "base", seed=3)
    auto = dict(refit.Engine(str(tmp_path / "base"), quant="q8_0-w8a8").named_parameters())
    down, up = auto["model.layers.0.mlp.down_proj.weight"], auto["model.layers.0.mlp.gate_up_proj.weight"]
    # Rows of 64 values hold no whole run of 16 blocks: left plain.
    assert up.transforms == ["quantize:q8_0-w8a8"]
    # Rows of 544: interleaved where the AVX-512 VNNI kernel runs, plain elsewhere.
    assert down.transforms in (["quantize:q8_0-w8a8"], ["quantize:q8_0-w8a8", "interleave_4x16"])
    # Asked for by name, the layout goes only to weights it applies to (as the shuffle
    # does): never to another scheme's codes, which no kernel reads interleaved.
    q8 = dict(refit.Engine(str(tmp_path / "base"), quant="q8_0", layout="interleave4x16").named_parameters())
    assert all("interleave_4x16" not in p.transforms for p in q8.values())
    with pytest.raises(Exception, match="unknown weight layout 'interleave8x8'"):
        refit.Engine(str(tmp_path / "base"), quant="q8_0-w8a8", layout="interleave8x8")
