"""A quantized engine exports the values it computes with: state_dict() gives each
checkpoint tensor decoded (codes times scales, in plain order, in the checkpoint's dtype),
so a trainer starts from what is served and can push it straight back."""
import pytest
import torch

import refit
import safetensors_io
from wide_mlp_llama import PROMPT, write_model

# Scheme, layout, and the largest relative RMS error of a decoded weight against the
# float weight it was quantized from (8-bit codes ~1%, FP8 e4m3 ~3%, 4-bit ~10%).
CASES = [("q8_0-w8a8", None, 0.01), ("q8_0-w8a8", "plain", 0.01), ("fp8-channel", None, 0.04),
         ("mxfp4", "shuffle16x16", 0.15)]


@pytest.mark.parametrize("quant,layout,tolerance", CASES)
def test_state_dict_of_a_quantized_engine_is_the_decoded_weights(quant, layout, tolerance, tmp_path):
    base = write_model(tmp_path / "base", seed=4)
    engine = refit.Engine(str(tmp_path / "base"), quant=quant, layout=layout)
    sd = engine.state_dict()
    assert set(sd) == set(base)
    for name, t in sd.items():
        assert t.dtype == torch.float32 and t.shape == base[name].shape, name
        error = ((t - base[name]).pow(2).mean() / base[name].pow(2).mean()).sqrt().item()
        assert error < tolerance, (name, error)
    # The decoded values are what the engine multiplies by: an f32 engine loaded with them
    # gives logits close to the quantized engine's (activations may be quantized too).
    safetensors_io.save(sd, tmp_path / "base" / "model.safetensors")
    decoded = refit.Engine(str(tmp_path / "base"))
    ours, theirs = engine.logits(PROMPT), decoded.logits(PROMPT)
    assert ((ours - theirs).pow(2).mean() / theirs.pow(2).mean()).sqrt().item() < 0.02

    # Pushed back, they are taken (re-quantized in place) without complaint.
    version = engine.update_weights_from_tensors(sd)
    assert version == engine.weight_version == 2


def test_q8_0_codes_survive_the_round_trip_bitwise(tmp_path):
    """Q8_0's decode-then-quantize is exact (the largest |value| of a block is 127 x its
    f16 scale, exactly), so pushing state_dict() back leaves every stored byte as it was."""
    write_model(tmp_path / "base", seed=5)
    engine = refit.Engine(str(tmp_path / "base"), quant="q8_0-w8a8")
    before = {n: p.as_bytes() for n, p in engine.named_parameters()}
    before = {n: torch.from_dlpack(b).clone() for n, b in before.items()}
    engine.update_weights_from_tensors(engine.state_dict())
    for name, p in engine.named_parameters():
        assert torch.equal(torch.from_dlpack(p.as_bytes()), before[name]), name
