"""refit: an LLM inference engine whose weights a trainer replaces in place, zero-copy.

    import refit, torch
    engine = refit.Engine("model-folder")
    out = engine.generate([1, 2, 3], max_tokens=16)          # out.ids, out.text, out.weight_version
    params = {n: torch.from_dlpack(t) for n, t in engine.named_parameters()}   # engine memory
    engine.update_weights_from_tensors(model.named_parameters())  # requires_grad is fine

Exported tensors share the engine's memory (torch.from_dlpack). Incoming tensors may
require grad, be non-contiguous views or be f32/f16/bf16; refit detaches and converts
them itself. See docs/python.md.

refit.LLM / refit.SamplingParams / refit.AsyncLLMEngine give vLLM's in-process API on the
continuous-batching scheduler (refit/llm.py).
"""

from ._refit import (  # noqa: F401
    DispatchError,
    Engine,
    Error,
    ExportError,
    FormatError,
    GenerateOutput,
    ParameterTensor,
    Tensor,
    UpdateError,
    WeightUpdate,
    has_cuda,
    zeros,
)
from .llm import (  # noqa: F401  vLLM-shaped in-process generation (docs/python.md)
    AsyncEngineArgs,
    AsyncLLMEngine,
    CompletionOutput,
    EngineArgs,
    LLM,
    LLMEngine,
    Logprob,
    RequestOutput,
    RequestOutputKind,
    SamplingParams,
)

__all__ = [
    "AsyncEngineArgs",
    "AsyncLLMEngine",
    "CompletionOutput",
    "DispatchError",
    "EngineArgs",
    "Engine",
    "Error",
    "ExportError",
    "FormatError",
    "GenerateOutput",
    "LLM",
    "LLMEngine",
    "Logprob",
    "ParameterTensor",
    "RequestOutput",
    "RequestOutputKind",
    "SamplingParams",
    "Tensor",
    "UpdateError",
    "WeightUpdate",
    "has_cuda",
    "zeros",
]
