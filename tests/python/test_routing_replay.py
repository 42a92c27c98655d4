"""Routing replay through the vLLM-shaped API, on the micro Qwen3-MoE oracle model:
LLM(enable_return_routed_experts=True) gives each output's routed_experts, int32
[prompt + completion - 1, moe layers, k] as vLLM's CompletionOutput does; handing them back
through SamplingParams(extra_args={"routed_experts": ...}) while rescoring the rollout gives
its logprobs bit for bit, and another routing changes them."""
import numpy as np
import pytest

import refit
from conftest import SHARED, require

QWEN3MOE = SHARED / "oracle" / "llamacpp" / "qwen3moe-f32" / "micro-qwen3moe-f32-s1.gguf"
DENSE = SHARED / "oracle" / "llamacpp" / "llama-f32" / "micro-llama-f32-s1.gguf"
PROMPT = [11, 402, 77, 1290, 5, 813, 64]


@pytest.fixture(scope="module")
def llm():
    model = refit.LLM(str(require(QWEN3MOE)), seed=0, enable_return_routed_experts=True)
    yield model
    model.close()


def rescore(llm, tokens, routed=None):
    params = refit.SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0,
                                  extra_args=None if routed is None else {"routed_experts": routed})
    out = llm.generate({"prompt_token_ids": tokens}, params, use_tqdm=False)[0]
    return [next(iter(d.values())).logprob for d in out.prompt_logprobs[1:]], out.outputs[0].routed_experts


def test_routed_experts_have_vllms_shape_and_replay_bitwise(llm):
    out = llm.generate({"prompt_token_ids": PROMPT}, refit.SamplingParams(max_tokens=5, temperature=0),
                       use_tqdm=False)[0].outputs[0]
    routed = out.routed_experts
    assert isinstance(routed, np.ndarray) and routed.dtype == np.int32
    assert routed.shape == (len(PROMPT) + len(out.token_ids) - 1, 4, 2)
    assert ((routed >= 0) & (routed < 8)).all()
    assert (routed[..., 0] != routed[..., 1]).all()
    seq = PROMPT + list(out.token_ids)
    free, free_routed = rescore(llm, seq)
    assert (free_routed[: routed.shape[0]] == routed).all()
    forced, _ = rescore(llm, seq, routed)
    assert forced == free
    other = (routed + 3) % 8
    moved, moved_routed = rescore(llm, seq, other)
    assert moved != free
    assert (moved_routed[: other.shape[0]] == other).all()


def test_bad_routing_is_refused_by_name(llm):
    with pytest.raises(ValueError, match="routed_experts"):
        rescore(llm, PROMPT, np.full((2, 4, 2), 99, dtype=np.int32))
    with pytest.raises(ValueError, match="routed_experts"):
        rescore(llm, PROMPT, np.zeros(7, dtype=np.int32))


def test_a_dense_model_refuses_routed_experts():
    with pytest.raises(ValueError, match="mixture-of-experts"):
        refit.LLM(str(require(DENSE)), enable_return_routed_experts=True)
