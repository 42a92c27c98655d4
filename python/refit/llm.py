"""vLLM-shaped in-process generation: refit.LLM, refit.SamplingParams, refit.AsyncLLMEngine.

Frameworks that embed vLLM (OpenRLHF's LLMRayActor, verl's rollout workers) build
``vllm.LLM(model, **engine_args)``, call ``llm.generate(prompts, sampling_params)`` and read
``RequestOutput.outputs[i].token_ids / .logprobs / .finish_reason``. The same calls work
here on refit's continuous-batching Scheduler (the loop the HTTP server runs): every
request of a generate() call is in flight at once, the Scheduler's loop thread runs the
batched steps, and the calling thread waits with the GIL released. On top of vLLM's
shapes each CompletionOutput carries ``weight_versions``: the engine weight version every
token was sampled under.

    import refit
    llm = refit.LLM("stories260K/hf", seed=0)
    params = refit.SamplingParams(temperature=1.0, max_tokens=64, logprobs=1, seed=1)
    outs = llm.generate([{"prompt_token_ids": [1, 403, 407]}] * 8, params)
    outs[0].outputs[0].token_ids, outs[0].outputs[0].weight_versions
    llm.update_weights_from_tensors(new_state_dict)      # between two generate() calls

See docs/python.md ("vLLM-style in-process API") for what differs from vLLM.

Pieces (C++ in python/llm_binding.cpp): _refit.Scheduler (submit -> Request),
_refit.RequestSet (wait for events, GIL released), _refit.Detokenizer (incremental text).
Here: parameters and outputs (pure data), _RequestState (one request's outputs assembled
from Scheduler events: stop strings, text, logprobs), and the three front ends —
LLM.generate (one RequestSet per call, so several threads may generate at once),
LLMEngine (add_request/step/abort_request, vLLM's engine loop shape) and AsyncLLMEngine
(a pump thread hands events to each request's asyncio queue).
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import itertools
import json
import math
import random
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from . import _refit

__all__ = [
    "AsyncEngineArgs",
    "AsyncLLMEngine",
    "CompletionOutput",
    "EngineArgs",
    "LLM",
    "LLMEngine",
    "Logprob",
    "RequestOutput",
    "RequestOutputKind",
    "SamplingParams",
]

_SAMPLING_EPS = 1e-5  # vLLM's: a temperature below this is greedy
# The end of the refusal after sleep(level=2); the Scheduler's admission check
# (llm_binding.cpp, kSendAgain) says the same for any submission that gets past this layer.
_SEND_AGAIN = ("send them again (update_weights_from_tensors, update_weights_from_disk or "
               "update_weights_from_distributed) first")


# ---------------------------------------------------------------------------------------
# Outputs (vllm/outputs.py and vllm/sequence.py of the v0.6-0.8 era)
# ---------------------------------------------------------------------------------------


@dataclass
class Logprob:
    """vLLM's Logprob: one token's log-probability, its rank (1 = the most likely) and text."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """One sampled sequence of a request (vLLM's CompletionOutput) plus ``weight_versions``."""

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    lora_request: Any = None
    # refit: the engine weight version each token was sampled under (len == len(token_ids)).
    weight_versions: List[int] = field(default_factory=list)
    # Mixture of experts, with LLM(enable_return_routed_experts=True) (vLLM's): the experts of
    # every position that went through the model, int32 [prompt + completion - 1, moe layers,
    # k] (a numpy array), once finished.
    routed_experts: Any = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """One request's outputs (vLLM's RequestOutput): cumulative unless output_kind says DELTA."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]]
    outputs: List[CompletionOutput]
    finished: bool
    metrics: Any = None
    lora_request: Any = None
    encoder_prompt: Optional[str] = None
    encoder_prompt_token_ids: Optional[List[int]] = None
    num_cached_tokens: Optional[int] = None


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0  # every RequestOutput holds everything so far
    DELTA = 1       # only what is new since the last one
    FINAL_ONLY = 2  # only the final one


# ---------------------------------------------------------------------------------------
# SamplingParams (vllm/sampling_params.py)
# ---------------------------------------------------------------------------------------

# Fields refit accepts only at vLLM's default value: anything else is refused by name.
_ONLY_DEFAULT = {
    "bad_words": None,
    "logits_processors": None,
    "guided_decoding": None,
    "logit_bias": None,
    "allowed_token_ids": None,
    "spaces_between_special_tokens": True,
}

# SamplingParams field -> the Scheduler field it needs (python/llm_binding.cpp's table).
_NEEDS_SCHEDULER = {
    "min_tokens": "min_tokens",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "prompt_logprobs": "prompt_logprobs_from",
    "logprobs_mode": "logprob_mode",
}

_LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits")


def _supported(scheduler_field: str) -> bool:
    return scheduler_field in _refit.Scheduler.supported_fields


class SamplingParams:
    """vLLM's sampling parameters, validated on construction (ValueError naming the field).

    Defaults are vLLM's (temperature 1.0, max_tokens 16, top_k -1 = off). refit adds
    ``repeat_last_n`` (how far back repetition_penalty looks; None = the whole context,
    as vLLM) and ``logprobs_mode`` per request (vLLM has it engine-wide: LLM(logprobs_mode=)).
    A field refit cannot honour is refused, never ignored.
    """

    def __init__(
        self,
        n: int = 1,
        best_of: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        min_p: float = 0.0,
        seed: Optional[int] = None,
        stop: Union[None, str, List[str]] = None,
        stop_token_ids: Optional[List[int]] = None,
        bad_words: Optional[List[str]] = None,
        include_stop_str_in_output: bool = False,
        ignore_eos: bool = False,
        max_tokens: Optional[int] = 16,
        min_tokens: int = 0,
        logprobs: Optional[int] = None,
        prompt_logprobs: Optional[int] = None,
        detokenize: bool = True,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        logits_processors: Optional[List[Callable]] = None,
        truncate_prompt_tokens: Optional[int] = None,
        output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
        guided_decoding: Any = None,
        logit_bias: Optional[Dict[int, float]] = None,
        allowed_token_ids: Optional[List[int]] = None,
        extra_args: Optional[Dict[str, Any]] = None,
        repeat_last_n: Optional[int] = None,
        logprobs_mode: Optional[str] = None,
    ):
        self.n = n
        self.best_of = best_of
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.repetition_penalty = repetition_penalty
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.seed = seed
        if stop is None:
            self.stop = []
        elif isinstance(stop, str):
            self.stop = [stop]
        else:
            self.stop = list(stop)
        self.stop_token_ids = [] if stop_token_ids is None else list(stop_token_ids)
        self.bad_words = bad_words
        self.include_stop_str_in_output = include_stop_str_in_output
        self.ignore_eos = ignore_eos
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs
        self.detokenize = detokenize
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self.logits_processors = logits_processors
        self.truncate_prompt_tokens = truncate_prompt_tokens
        self.output_kind = output_kind
        self.guided_decoding = guided_decoding
        self.logit_bias = logit_bias
        self.allowed_token_ids = allowed_token_ids
        self.extra_args = extra_args
        self.repeat_last_n = repeat_last_n
        self.logprobs_mode = logprobs_mode
        self._verify()

    # vLLM's checks (its messages name the field), then refit's own limits.
    def _verify(self) -> None:
        # Callers set fields after construction (verl's update_sampling_params, OpenRLHF's
        # agent loop): every request re-checks its params, normalizing as __init__ does.
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        elif not isinstance(self.stop, list):
            self.stop = list(self.stop)
        if self.stop_token_ids is None:
            self.stop_token_ids = []

        def bad(name, why):
            raise ValueError(f"SamplingParams.{name} {why}, got {getattr(self, name)!r}")

        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        if not is_int(self.n) or self.n < 1:
            bad("n", "must be an int >= 1")
        if self.best_of is not None and (not is_int(self.best_of) or self.best_of < self.n):
            bad("best_of", f"must be an int >= n ({self.n})")
        if self.best_of is not None and self.best_of != self.n:
            bad("best_of", "> n (sample best_of and keep the best n) is not supported by refit; leave it None")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not -2.0 <= v <= 2.0:
                bad(name, "must be in [-2, 2]")
        if not isinstance(self.repetition_penalty, (int, float)) or not self.repetition_penalty > 0.0:
            bad("repetition_penalty", "must be > 0")
        if not isinstance(self.temperature, (int, float)) or not self.temperature >= 0.0 or math.isinf(self.temperature):
            bad("temperature", "must be a finite number >= 0")
        if not isinstance(self.top_p, (int, float)) or not 0.0 < self.top_p <= 1.0:
            bad("top_p", "must be in (0, 1]")
        if not is_int(self.top_k) or self.top_k < -1:
            bad("top_k", "must be -1 or 0 (off) or >= 1")
        if not isinstance(self.min_p, (int, float)) or not 0.0 <= self.min_p <= 1.0:
            bad("min_p", "must be in [0, 1]")
        if self.seed is not None and (not is_int(self.seed) or not 0 <= self.seed < 2**64):
            bad("seed", "must be None or an int in [0, 2**64)")
        if self.max_tokens is not None and (not is_int(self.max_tokens) or self.max_tokens < 1):
            bad("max_tokens", "must be None or an int >= 1")
        if not is_int(self.min_tokens) or self.min_tokens < 0:
            bad("min_tokens", "must be an int >= 0")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            bad("min_tokens", f"must be <= max_tokens ({self.max_tokens})")
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and (not is_int(v) or v < -1):
                bad(name, "must be None, -1 (the whole vocabulary) or an int >= 0")
        if any(not isinstance(s, str) or not s for s in self.stop):
            bad("stop", "must be non-empty strings")
        if any(not is_int(t) or t < 0 for t in self.stop_token_ids):
            bad("stop_token_ids", "must be token ids (ints >= 0)")
        if self.truncate_prompt_tokens is not None and (
            not is_int(self.truncate_prompt_tokens) or self.truncate_prompt_tokens < 1
        ):
            bad("truncate_prompt_tokens", "must be None or an int >= 1")
        if not isinstance(self.output_kind, RequestOutputKind):
            bad("output_kind", "must be a RequestOutputKind")
        if self.repeat_last_n is not None and (not is_int(self.repeat_last_n) or self.repeat_last_n < 0):
            bad("repeat_last_n", "must be None (the whole context) or an int >= 0")
        if self.logprobs_mode is not None and self.logprobs_mode not in _LOGPROBS_MODES:
            bad("logprobs_mode", f"must be None or one of {', '.join(_LOGPROBS_MODES)}")
        if self.extra_args is not None and not isinstance(self.extra_args, dict):
            bad("extra_args", "must be None or a dict")
        for name, default in _ONLY_DEFAULT.items():
            if getattr(self, name) != default:
                bad(name, f"is not supported by refit (only {default!r})")
        # Options that need a Scheduler feature this build may lack.
        wanted = {
            "min_tokens": self.min_tokens != 0,
            "frequency_penalty": self.frequency_penalty != 0.0,
            "presence_penalty": self.presence_penalty != 0.0,
            "prompt_logprobs": self.prompt_logprobs is not None,
            "logprobs_mode": self.logprobs_mode is not None,
        }
        for name, used in wanted.items():
            if used and not _supported(_NEEDS_SCHEDULER[name]):
                bad(name, "is not supported by this build's Scheduler (it has no "
                          f"'{_NEEDS_SCHEDULER[name]}'); leave it at its default")
        if self.stop and not self.detokenize:
            bad("stop", "needs detokenize=True (stop strings are matched on the text)")

    @property
    def sampling_type(self) -> str:
        return "greedy" if self.temperature < _SAMPLING_EPS else ("random_seed" if self.seed is not None else "random")

    def _snapshot(self) -> "SamplingParams":
        import copy

        c = copy.copy(self)
        c.stop, c.stop_token_ids = list(self.stop), list(self.stop_token_ids)
        return c

    def clone(self) -> "SamplingParams":
        import copy

        return copy.deepcopy(self)

    def _as_dict(self) -> Dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __eq__(self, other) -> bool:
        return isinstance(other, SamplingParams) and self._as_dict() == other._as_dict()

    def __repr__(self) -> str:
        fields_ = ", ".join(f"{k}={v!r}" for k, v in self._as_dict().items())
        return f"SamplingParams({fields_})"


# ---------------------------------------------------------------------------------------
# One request's state, assembled from Scheduler events
# ---------------------------------------------------------------------------------------


class _Sample:
    """One Scheduler request = one CompletionOutput (index j of a request with n samples)."""

    def __init__(self, req: "_RequestState", index: int, seed: int):
        self.req = req
        self.index = index
        self.seed = seed
        self.handle = None  # _refit.Request once submitted
        self.reset()

    def reset(self):
        p = self.req.params
        self.tokens: List[int] = []
        self.versions: List[int] = []
        self.logprobs: Optional[List[Dict[int, Logprob]]] = [] if p.logprobs is not None else None
        self.cumulative = 0.0
        self.text = ""
        self.last_piece_len = 0  # characters the last token added to text
        self.finish_reason: Optional[str] = None
        self.stop_reason: Union[int, str, None] = None
        self.detok = self.req.llm._detokenizer(p, self.req.prompt_ids) if self.req.wants_text else None
        self.sent_tokens = 0  # DELTA outputs: what the consumer has already seen
        self.sent_text = 0

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def on_token(self, token: int, logprob: float, version: int, top, rank) -> None:
        p = self.req.params
        self.tokens.append(token)
        self.versions.append(version)
        self.cumulative += logprob
        if self.logprobs is not None:
            self.logprobs.append(self.req.llm._logprob_dict(token, logprob, rank, top, p.logprobs))
        if self.detok is None:
            return
        piece = self.detok.push(token)
        before = len(self.text)
        self.text += piece
        self.last_piece_len = len(piece)
        if p.stop and len(self.tokens) >= p.min_tokens:
            # A stop string may straddle earlier text: search from the longest stop back.
            start = max(0, before - max(len(s) for s in p.stop) + 1)
            hit = None
            for s in p.stop:
                at = self.text.find(s, start)
                if at >= 0 and (hit is None or at < hit[0]):
                    hit = (at, s)
            if hit is not None:
                at, s = hit
                self.text = self.text[: at + len(s)] if p.include_stop_str_in_output else self.text[:at]
                self.finish_reason = "stop"
                self.stop_reason = s
                self.handle.cancel()  # the Scheduler frees its blocks at its next step

    def on_finished(self, reason: str, error: str, busy: bool, routed: Any = None) -> None:
        if routed is not None:
            self.routed_experts = self.req.llm._routing_array(routed)
        if self.done:
            return  # already ended here (a stop string); this is the Scheduler's "abort"
        if reason == "error":
            self.req.error = error or "generation failed"
            self.req.busy = busy
            reason = "abort"
        p = self.req.params
        if reason == "stop" and self.tokens:
            last = self.tokens[-1]
            self.stop_reason = None if (last == self.req.eos and not p.ignore_eos) else last
            # As vLLM: the stop token's own text is left out unless include_stop_str_in_output.
            if self.detok is not None and not p.include_stop_str_in_output:
                if self.last_piece_len:
                    self.text = self.text[: len(self.text) - self.last_piece_len]
                self.detok = None  # what it holds back belongs to the stop token
        if self.detok is not None:
            self.text += self.detok.finish()
        self.finish_reason = reason

    def visible_text(self) -> str:
        """The text so far, less what could still be the start of a stop string (it is cut
        if the stop completes), so streamed text never has to be taken back."""
        stop = self.req.params.stop
        if self.done or not stop:
            return self.text
        hold = max(len(s) for s in stop) - 1
        return self.text[: max(0, len(self.text) - hold)] if hold else self.text

    def output(self, delta: bool) -> CompletionOutput:
        t0 = self.sent_tokens if delta else 0
        c0 = self.sent_text if delta else 0
        text = self.visible_text()
        out = CompletionOutput(
            index=self.index,
            text=text[c0:],
            token_ids=self.tokens[t0:],
            cumulative_logprob=self.cumulative,
            logprobs=None if self.logprobs is None else self.logprobs[t0:],
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
            weight_versions=self.versions[t0:],
            routed_experts=getattr(self, "routed_experts", None),
        )
        if delta:
            self.sent_tokens, self.sent_text = len(self.tokens), len(text)
        return out


class _RequestState:
    """A request (one prompt, n samples) from submission to its final RequestOutput."""

    def __init__(self, llm: "LLM", request_id: str, prompt: Optional[str], prompt_ids: List[int],
                 params: SamplingParams, max_tokens: int):
        self.llm = llm
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_ids = prompt_ids
        self.params = params
        self.max_tokens = max_tokens
        self.eos = llm._eos
        self.wants_text = params.detokenize and llm._has_tokenizer
        self.error: Optional[str] = None
        self.busy = False
        self.num_cached_tokens: Optional[int] = None
        seeds = llm._seeds(params)
        self.samples = [_Sample(self, j, seeds[j]) for j in range(params.n)]
        self.prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]] = None
        self._reset_prompt_logprobs()

    def _reset_prompt_logprobs(self):
        if self.params.prompt_logprobs is not None:
            self.prompt_logprobs = [None] * len(self.prompt_ids)

    @property
    def finished(self) -> bool:
        return all(s.done for s in self.samples)

    def fields(self, j: int) -> Dict[str, Any]:
        """The Scheduler fields of sample j (python/llm_binding.cpp's table)."""
        p = self.params
        greedy = p.temperature < _SAMPLING_EPS
        stop = list(p.stop_token_ids)
        if not p.ignore_eos:  # the tokenizer's eos and every eos_token_id of the model's files
            stop += [i for i in self.llm._eos_ids if i not in stop]
        f: Dict[str, Any] = {
            "max_tokens": self.max_tokens,
            "temperature": 0.0 if greedy else float(p.temperature),
            "top_k": 0 if greedy or p.top_k in (-1, 0) else p.top_k,
            "top_p": 1.0 if greedy else float(p.top_p),
            "min_p": 0.0 if greedy else float(p.min_p),
            "repetition_penalty": float(p.repetition_penalty),
            # vLLM's repetition penalty looks at the whole prompt and output.
            "repeat_last_n": p.repeat_last_n if p.repeat_last_n is not None else self.llm.max_model_len,
            "seed": self.samples[j].seed,
            "stop_tokens": stop,
            "top_logprobs": self.llm._top_wanted(p.logprobs),
            # Non-streaming consumers restart a retracted request (one weight version per output).
            "restart_on_retract": True,
        }
        if p.min_tokens:
            f["min_tokens"] = p.min_tokens
        if self.llm._return_routed_experts:
            f["return_routed_experts"] = True
        # Routing replay (refit): SamplingParams(extra_args={"routed_experts": ids}) forces the
        # experts of positions 0.. ([positions, moe layers, k], e.g. a rollout's routed_experts).
        if p.extra_args and p.extra_args.get("routed_experts") is not None:
            f["routed_experts"] = p.extra_args["routed_experts"]
        if p.frequency_penalty:
            f["frequency_penalty"] = float(p.frequency_penalty)
        if p.presence_penalty:
            f["presence_penalty"] = float(p.presence_penalty)
        mode = p.logprobs_mode or self.llm._logprobs_mode
        if mode is not None:
            f["logprob_mode"] = mode
        if p.prompt_logprobs is not None and j == 0:
            f["prompt_logprobs_from"] = 1
            f["prompt_top_logprobs"] = self.llm._vocab if p.prompt_logprobs == -1 else p.prompt_logprobs
        return f

    def apply(self, sample: _Sample, ev: tuple) -> None:
        kind = ev[1]
        if kind == "token":
            if not sample.done:
                sample.on_token(ev[2], ev[3], ev[4], ev[5], ev[6])
        elif kind == "finished":
            sample.on_finished(ev[2], ev[3], ev[4], ev[6] if len(ev) > 6 else None)
            if sample.index == 0:
                self.num_cached_tokens = ev[5]
        elif kind == "restart":
            sample.reset()
            if sample.index == 0:
                self._reset_prompt_logprobs()
        elif kind == "prompt" and self.prompt_logprobs is not None:
            k = self.params.prompt_logprobs
            for position, token, logprob, rank, top, _version in ev[2]:
                self.prompt_logprobs[position] = self.llm._logprob_dict(token, logprob, rank, top, k)

    def output(self, delta: Optional[bool] = None) -> RequestOutput:
        """A snapshot; delta (default: output_kind is DELTA) holds only what is new since the last."""
        if delta is None:
            delta = self.params.output_kind == RequestOutputKind.DELTA
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_ids,
            prompt_logprobs=self.prompt_logprobs,
            outputs=[s.output(delta) for s in self.samples],
            finished=self.finished,
            num_cached_tokens=self.num_cached_tokens,
        )

    def cancel(self) -> None:
        for s in self.samples:
            if s.handle is not None:
                s.handle.cancel()

    def raise_error(self) -> None:
        if self.error is not None:
            raise _refit.Error(f"request {self.request_id}: {self.error}")


class _Consumer:
    """The requests one waiter (a generate() call, an LLMEngine, the async pump) routes."""

    def __init__(self):
        self.set = _refit.RequestSet()
        self.routes: Dict[int, _Sample] = {}

    def add(self, req: _RequestState) -> None:
        for s in req.samples:
            self.routes[s.handle.id] = s
            self.set.add(s.handle)

    def wait(self, timeout: float) -> List[_RequestState]:
        """Applies the events that arrive within `timeout`; returns the requests they changed."""
        changed: Dict[str, _RequestState] = {}
        for ev in self.set.wait(timeout):
            sample = self.routes.get(ev[0])
            if sample is None:
                continue
            sample.req.apply(sample, ev)
            if ev[1] == "finished":
                del self.routes[ev[0]]
            changed[sample.req.request_id] = sample.req
        return list(changed.values())


# ---------------------------------------------------------------------------------------
# LLM
# ---------------------------------------------------------------------------------------

# vLLM engine arguments that describe GPU placement or memory and mean nothing to refit's
# CPU engine: accepted (so a vLLM caller's constructor runs unchanged), listed in
# LLM.ignored_engine_args, and warned about when set to anything but their default.
_PLACEMENT_ARGS = {
    "gpu_memory_utilization": 0.9,
    "enforce_eager": False,
    "swap_space": 4,
    "cpu_offload_gb": 0,
    "trust_remote_code": False,
    "distributed_executor_backend": None,
    "worker_cls": "auto",
    "worker_extension_cls": "",
    "disable_custom_all_reduce": False,
    "disable_log_stats": True,
    "max_seq_len_to_capture": 8192,
    "tokenizer_mode": "auto",
    "revision": None,
    "tokenizer_revision": None,
    "load_format": "auto",
    "pipeline_parallel_size": 1,
    "enable_chunked_prefill": None,
    "num_gpu_blocks_override": None,
    "compilation_config": None,
    "disable_async_output_proc": False,
    "hf_overrides": None,
    "bundle_indices": None,
    "disable_mm_preprocessor_cache": False,
    "limit_mm_per_prompt": None,
    "enable_lora": False,
    "max_num_partial_prefills": 1,
}


class LLM:
    """vLLM's offline ``LLM`` on refit: ``LLM(model, **engine_args)``, ``generate(...)``.

    model: a Hugging Face folder, a GGUF file or a llama2.c .bin — or an existing
    refit.Engine to serve (its weights, its updates). vLLM engine arguments refit honours:
    tokenizer (a tokenizer file for llama2.c models), tensor_parallel_size (1 only),
    dtype ("auto"; others are warned about: refit computes on the checkpoint's weights),
    quantization (refit's quant names: "fp8", "q8_0", ...), seed (the stream unseeded
    requests draw their seeds from), max_model_len, enable_prefix_caching, max_num_seqs,
    max_num_batched_tokens, block_size, enable_sleep_mode, logprobs_mode, generation_config
    ("auto": the model's generation_config.json sampling defaults; "vllm"; or a folder). refit's own:
    threads, layout, kv_cache_bytes, kv_blocks, max_waiting, queue_timeout.
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Optional[str] = None,
        *,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        quantization: Optional[str] = None,
        seed: Optional[int] = None,
        max_model_len: Optional[int] = None,
        enable_prefix_caching: Optional[bool] = None,
        max_num_seqs: Optional[int] = None,
        max_num_batched_tokens: Optional[int] = None,
        block_size: Optional[int] = None,
        enable_sleep_mode: bool = False,
        skip_tokenizer_init: bool = False,
        logprobs_mode: Optional[str] = None,
        generation_config: str = "auto",
        # refit's own
        threads: Optional[int] = None,
        layout: Optional[str] = None,
        kv_cache_bytes: Optional[int] = None,
        kv_blocks: int = 0,
        max_waiting: int = 1 << 30,
        queue_timeout: float = 1e9,
        enable_return_routed_experts: bool = False,
        **placement_args,
    ):
        unknown = sorted(set(placement_args) - set(_PLACEMENT_ARGS))
        if unknown:
            raise TypeError(f"LLM: unexpected engine argument(s) {', '.join(unknown)}")
        if placement_args.get("enable_lora"):
            raise ValueError("LLM: enable_lora=True: LoRA adapters are not supported by refit")
        self.ignored_engine_args = dict(placement_args)
        changed = [k for k, v in placement_args.items() if v != _PLACEMENT_ARGS[k]]
        if changed:
            warnings.warn(
                "refit.LLM: " + ", ".join(f"{k}={placement_args[k]!r}" for k in changed)
                + " describe GPU placement or memory and have no effect on refit's engine",
                stacklevel=2,
            )
        if tensor_parallel_size != 1:
            raise ValueError(
                f"LLM: tensor_parallel_size={tensor_parallel_size} is not supported in-process (the Scheduler runs "
                "one process's model); shard with `refit serve --tp N` or use refit.Engine(tp=N) under mpirun"
            )
        if dtype not in ("auto", None):
            self.ignored_engine_args["dtype"] = dtype
            warnings.warn(
                f"refit.LLM: dtype={dtype!r} is not applied: refit computes with the checkpoint's weights as "
                "stored (or as quantization= says) and f32 activations",
                stacklevel=2,
            )
        if logprobs_mode is not None and logprobs_mode not in _LOGPROBS_MODES:
            raise ValueError(f"LLM: logprobs_mode must be one of {', '.join(_LOGPROBS_MODES)}, got {logprobs_mode!r}")
        if logprobs_mode is not None and not _supported("logprob_mode"):
            raise ValueError("LLM: logprobs_mode is not supported by this build's Scheduler")
        if enable_sleep_mode and not _refit.Scheduler.can_sleep:
            raise ValueError("LLM: enable_sleep_mode=True: this build's Scheduler cannot release its memory")
        if skip_tokenizer_init:
            raise ValueError("LLM: skip_tokenizer_init=True is not supported (pass token ids and detokenize=False)")

        if isinstance(model, _refit.Engine):
            if (tokenizer is not None or quantization is not None or threads is not None or layout is not None
                    or generation_config != "auto"):
                raise ValueError("LLM: tokenizer, quantization, threads, layout and generation_config describe a "
                                 "new engine; "
                                 "an existing refit.Engine was given")
            self.engine = model
        else:
            self.engine = _refit.Engine(model, quant=quantization, threads=threads, tokenizer=tokenizer, layout=layout,
                                        generation_config=generation_config)
        config = self.engine.config
        model_len = int(config["max_position_embeddings"])
        if max_model_len is not None:
            if not isinstance(max_model_len, int) or not 1 <= max_model_len <= model_len:
                raise ValueError(f"LLM: max_model_len must be in 1..{model_len} (the model's context), "
                                 f"got {max_model_len!r}")
            model_len = max_model_len
        self.max_model_len = model_len
        self._vocab = int(config["vocab_size"])
        kwargs = dict(kv_blocks=kv_blocks, kv_memory_bytes=kv_cache_bytes, max_waiting=max_waiting,
                      queue_timeout=queue_timeout, prefix_cache=True if enable_prefix_caching is None
                      else bool(enable_prefix_caching))
        if block_size is not None:
            kwargs["block_size"] = block_size
        if max_num_seqs is not None:
            kwargs["max_running"] = max_num_seqs
        if max_num_batched_tokens is not None:
            kwargs["max_step_tokens"] = max_num_batched_tokens
        self.scheduler = _refit.Scheduler(self.engine, **kwargs)
        self._eos = self.scheduler.eos_token_id  # primary: stop_reason None, as vLLM
        self._eos_ids = list(self.scheduler.eos_token_ids)  # every id that ends generation
        self._has_tokenizer = self.engine.has_tokenizer
        self._chat_templates: Dict[str, Any] = {}  # chat_template argument -> _refit.ChatTemplate
        self._logprobs_mode = logprobs_mode
        self._routing_shape = tuple(self.scheduler.routing_shape)  # (moe layers, k)
        if enable_return_routed_experts and self._routing_shape[0] == 0:
            raise ValueError("LLM: enable_return_routed_experts=True: the model has no mixture-of-experts layers")
        self._return_routed_experts = bool(enable_return_routed_experts)
        self._sleep_mode = enable_sleep_mode
        self._seed_rng = random.Random(seed) if seed is not None else random.SystemRandom()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._live: Dict[str, _RequestState] = {}  # every unfinished request, whoever waits on it
        self._pieces: Dict[int, str] = {}
        self.llm_engine = LLMEngine(self)
        self._sync = None  # _refit.WeightSync, made at the first init_weights_update_group
        self._update_group = "weight_update_group"  # OpenRLHF's update_weight group (init_process_group's)

    # ---- generation ----

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's: SamplingParams() with the model's generation_config.json defaults (temperature,
        top_p, top_k, min_p, repetition_penalty, max_new_tokens as max_tokens); what generate()
        uses when given no sampling_params."""
        defaults = dict(self.engine.generation_defaults)
        defaults.pop("max_tokens_cap", None)
        return SamplingParams(**defaults)

    def generate(
        self,
        prompts: Any = None,
        sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
        prompt_token_ids: Optional[Union[List[int], List[List[int]]]] = None,
        use_tqdm: bool = True,
        lora_request: Any = None,
        prompt_adapter_request: Any = None,
        guided_options_request: Any = None,
        priority: Optional[List[int]] = None,
    ) -> List[RequestOutput]:
        """Generates for every prompt at once (continuous batching); outputs in prompt order.

        prompts: a string, a {"prompt": str} or {"prompt_token_ids": [...]} dict, or a list of
        them; or (vLLM's older form) prompt_token_ids=[[...], ...]. sampling_params: one for
        all, or one per prompt. The calling thread waits with the GIL released; other
        threads may call generate() on the same LLM at the same time.
        """
        for name, value in (("lora_request", lora_request), ("prompt_adapter_request", prompt_adapter_request),
                            ("guided_options_request", guided_options_request), ("priority", priority)):
            if value is not None:
                raise ValueError(f"generate: {name} is not supported by refit")
        items = self._prompt_list(prompts, prompt_token_ids)
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            params_list = [sampling_params] * len(items)
        else:
            params_list = list(sampling_params)
            if len(params_list) != len(items):
                raise ValueError(f"generate: {len(params_list)} sampling_params for {len(items)} prompts "
                                 "(give one, or one per prompt)")
            for p in params_list:
                if not isinstance(p, SamplingParams):
                    raise TypeError(f"generate: sampling_params must be SamplingParams, got {type(p).__name__}")
        requests = [self._new_request(None, item, p) for item, p in zip(items, params_list)]
        consumer = _Consumer()
        bar = _progress(len(requests)) if use_tqdm else None
        try:
            for r in requests:
                self._submit(r, consumer)
            left = {r.request_id for r in requests}
            while left:
                for r in consumer.wait(0.25):
                    if r.finished and r.request_id in left:
                        left.discard(r.request_id)
                        self._retire(r)
                        if bar is not None:
                            bar.update(1)
        except BaseException:
            for r in requests:
                r.cancel()
                self._retire(r)
            raise
        finally:
            if bar is not None:
                bar.close()
        for r in requests:
            r.raise_error()
        # Outputs are cumulative here whatever output_kind says (vLLM's LLM.generate too).
        return [_final_output(r) for r in requests]

    def chat(
        self,
        messages: Any,
        sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
        use_tqdm: bool = True,
        lora_request: Any = None,
        chat_template: Optional[str] = None,
        chat_template_content_format: str = "auto",
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Optional[List[Dict[str, Any]]] = None,
        documents: Optional[List[Dict[str, Any]]] = None,
        chat_template_kwargs: Optional[Dict[str, Any]] = None,
        mm_processor_kwargs: Any = None,
    ) -> List[RequestOutput]:
        """vLLM's LLM.chat: each conversation (a list of OpenAI messages, or a list of such
        lists) rendered with the model's chat template (or `chat_template`: a Jinja file or the
        template text) exactly as `refit serve` renders it (Jinja2, transformers' environment),
        tokenized without adding specials again, then generated as generate() does. A template
        that raises gives a ValueError with its message."""
        if lora_request is not None or mm_processor_kwargs is not None:
            raise ValueError("chat: lora_request and mm_processor_kwargs are not supported by refit")
        if chat_template_content_format not in ("auto", "string"):
            raise ValueError(f"chat: chat_template_content_format {chat_template_content_format!r} is not "
                             "supported (refit passes text content as a string, vLLM's 'string' format)")
        if not self._has_tokenizer:
            raise ValueError("chat: this model has no tokenizer")
        if not isinstance(messages, (list, tuple)) or not messages:
            raise ValueError("chat: messages must be a non-empty list of messages or of conversations")
        conversations = [messages] if isinstance(messages[0], dict) else list(messages)
        template = self._chat_templates.get(chat_template or "")
        if template is None:
            template = _refit.ChatTemplate(self.engine, chat_template or "")
            self._chat_templates[chat_template or ""] = template
        prompts = []
        for conversation in conversations:
            body = {"messages": list(conversation), "add_generation_prompt": add_generation_prompt,
                    "continue_final_message": continue_final_message}
            if tools is not None:
                body["tools"] = tools
            if documents is not None:
                body["documents"] = documents
            if chat_template_kwargs:
                body["chat_template_kwargs"] = chat_template_kwargs
            text = template.render(json.dumps(body, ensure_ascii=False))
            prompts.append({"prompt_token_ids": self.engine.encode(text, False, True)})
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    # vLLM's engine-loop surface, on the LLM too (OpenRLHF-style actors call these).
    def add_request(self, request_id: str, prompt: Any, params: SamplingParams, **kwargs) -> None:
        self.llm_engine.add_request(request_id, prompt, params, **kwargs)

    def step(self, timeout: Optional[float] = None) -> List[RequestOutput]:
        return self.llm_engine.step(timeout)

    def abort_request(self, request_id: Union[str, Iterable[str]]) -> None:
        """Ends the requests (any front end's): each finishes with finish_reason "abort"."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        with self._lock:
            found = [self._live[i] for i in ids if i in self._live]
        for r in found:
            r.cancel()

    def get_num_unfinished_requests(self) -> int:
        """Requests submitted on this LLM (generate, add_request, async) that have not finished."""
        with self._lock:
            return len(self._live)

    def has_unfinished_requests(self) -> bool:
        return self.get_num_unfinished_requests() > 0

    def reset_prefix_cache(self) -> bool:
        self.scheduler.flush_cache()
        return True

    def get_tokenizer(self) -> "_Tokenizer":
        return _Tokenizer(self.engine, self._eos)

    # ---- weights: updates land between steps ----

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    def run_exclusive(self, fn: Callable[[], Any], mode: str = "drain") -> Any:
        """Runs fn() with no step in flight and returns its result.

        mode "drain" (default): stop admitting, let started requests finish on the old
        weights, then run fn: every output is on one weight version. "abort": end every
        request first (finish_reason "abort"). "retract": re-queue running requests, which
        restart from their prompts afterwards. "in_place": keep everything; requests go on
        with the new weights and their old KV. Do not generate from inside fn.
        """
        result = []
        self.scheduler.run_exclusive(mode, lambda: result.append(fn()))
        return result[0]

    def update_weights_from_tensors(self, tensors, *, mode: str = "drain", check_finite: bool = True,
                                    ignore_unknown_tensors: bool = False) -> int:
        """Engine.update_weights_from_tensors between steps (see run_exclusive); the new version.

        NaN/inf values are refused unless check_finite=False; names no parameter takes are
        refused unless ignore_unknown_tensors=True. engine.last_update_report() says what
        was written.
        """
        return self.run_exclusive(
            lambda: self.engine.update_weights_from_tensors(tensors, check_finite=check_finite,
                                                            ignore_unknown_tensors=ignore_unknown_tensors), mode)

    def update_weights_from_disk(self, path, names=None, *, mode: str = "drain", check_finite: bool = True,
                                 ignore_unknown_tensors: bool = False) -> int:
        return self.run_exclusive(
            lambda: self.engine.update_weights_from_disk(path, names=names, check_finite=check_finite,
                                                         ignore_unknown_tensors=ignore_unknown_tensors), mode)

    # ---- weights from a torch.distributed group (SGLang's and OpenRLHF's weight sync) ----
    #
    # The trainer (rank 0) creates a gloo group as SGLang's init_custom_process_group /
    # OpenRLHF's init_process_group do (a TCPStore it hosts, PrefixStore(group_name),
    # ProcessGroupGloo) and this engine joins it as rank_offset; each update the trainer
    # broadcasts the tensors it announced here (one dist.broadcast per tensor, src=0, or one
    # flattened uint8 bucket). Received tensors are validated and staged, then committed
    # between two scheduler steps exactly as update_weights_from_tensors does.

    def init_weights_update_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                                  group_name: str = "weight_update_group", backend: str = "gloo",
                                  timeout: Any = None) -> str:
        """Joins the trainer's torch.distributed group as rank `rank_offset` (SGLang's call).

        Blocks (GIL released) until the trainer has created the group too, or `timeout`
        (seconds or a datetime.timedelta; None: 30 minutes, torch's default) passes. A group
        of the same name is replaced (a trainer that restarted). backend must be "gloo":
        "nccl" needs GPUs (ValueError). Returns the group's description; raises refit.Error
        when the group cannot be joined.
        """
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)):
            raise TypeError(f"init_weights_update_group: timeout must be seconds or a datetime.timedelta, "
                            f"got {timeout!r}")
        for what, v in (("master_port", master_port), ("rank_offset", rank_offset), ("world_size", world_size)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"init_weights_update_group: {what} must be an int, got {v!r}")
        return self._weight_sync().init(str(master_address), master_port, rank_offset, world_size, group_name,
                                        backend, timeout)

    def update_weights_from_distributed(self, names, dtypes, shapes, group_name: str = "weight_update_group",
                                        load_format: Optional[str] = None, *, flush_cache: bool = True,
                                        mode: str = "drain", check_finite: bool = True,
                                        ignore_unknown_tensors: bool = False) -> int:
        """Receives the tensors the trainer broadcasts on `group_name` and commits them between steps.

        names/dtypes/shapes: one entry per tensor in the trainer's broadcast order (dtypes as
        torch dtypes or their names, "bfloat16" / "torch.bfloat16"; a single name, dtype and
        shape is one tensor). load_format "flattened_bucket": one broadcast of every tensor's
        bytes back to back (SGLang's FlattenedTensorBucket). mode: as run_exclusive ("drain":
        started requests finish on the old weights first). The receive blocks with the GIL
        released. Returns the new weight version.

        Failures leave the engine on its old weights, bit for bit: the trainer gone or timed
        out mid-broadcast raises refit.Error and breaks the group (init it again); a received
        tensor the engine refuses (unknown name, wrong shape or dtype) raises
        refit.UpdateError and the group stays usable; arguments that cannot be received
        raise ValueError and leave the group. flush_cache: accepted for SGLang's callers — a
        committed update always drops the prefix cache (its blocks came from the old weights).
        """
        if isinstance(names, str):  # one tensor (SGLang's older {name, dtype, shape})
            names, dtypes, shapes = [names], [dtypes], [shapes]
        if load_format not in (None, "flattened_bucket"):
            raise ValueError(f"update_weights_from_distributed: load_format {load_format!r} is not supported "
                             "(None or 'flattened_bucket')")
        del flush_cache
        # Anything malformed is refused by the C++ (which then leaves the group: its
        # broadcasts cannot be received), so only well-formed lists are normalized here.
        if isinstance(dtypes, (list, tuple)):
            dtypes = [_dtype_name(d) for d in dtypes]
        if isinstance(shapes, (list, tuple)):
            shapes = [_shape_list(s) for s in shapes]
        staged = self._weight_sync().receive(names, dtypes, shapes, group_name, load_format == "flattened_bucket",
                                             check_finite, ignore_unknown_tensors)
        try:
            return self.run_exclusive(staged.commit, mode)
        finally:
            if not staged.finished:
                staged.abort()

    def destroy_weights_update_group(self, group_name: str = "weight_update_group") -> None:
        """Leaves the group (refit.Error when this engine has not joined one of that name)."""
        self._weight_sync().destroy(group_name)

    # OpenRLHF's worker-extension names (openrlhf/trainer/ray/vllm_worker_wrap.py), so its
    # LLMRayActor maps 1:1: init_process_group(...) then update_weight(...) per parameter.
    def init_process_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                           group_name: str = "weight_update_group", backend: str = "gloo", use_ray: bool = False,
                           timeout: Any = None) -> str:
        """OpenRLHF's WorkerWrap.init_process_group: init_weights_update_group; use_ray=True is refused."""
        if use_ray:
            raise ValueError("init_process_group: use_ray=True (ray.util.collective) is not supported by refit; "
                             "use a torch.distributed gloo group (use_ray=False)")
        if group_name == "":
            raise ValueError("init_process_group: group name must not be empty")
        description = self.init_weights_update_group(master_address, master_port, rank_offset, world_size,
                                                     group_name, backend, timeout)
        self._update_group = group_name
        return description

    def update_weight(self, name: str, dtype: Any, shape: Any, empty_cache: bool = False, *,
                      group_name: Optional[str] = None, mode: str = "drain") -> int:
        """OpenRLHF's WorkerWrap.update_weight: receives one broadcast tensor and commits it.

        group_name defaults to the last init_process_group's. Each call is one transaction (one
        weight version); empty_cache (CUDA's allocator) means nothing here. Returns the version.
        """
        del empty_cache
        return self.update_weights_from_distributed([name], [dtype], [shape],
                                                    group_name or self._update_group, mode=mode)

    # The methods an OpenRLHF / vLLM caller reaches through collective_rpc on refit.
    _RPC_METHODS = ("init_process_group", "update_weight", "init_weights_update_group",
                    "update_weights_from_distributed", "destroy_weights_update_group")

    def collective_rpc(self, method: Union[str, Callable], timeout: Optional[float] = None, args: tuple = (),
                       kwargs: Optional[Dict[str, Any]] = None) -> List[Any]:
        """vLLM's LLM.collective_rpc for the weight-sync methods above: one worker, so [result]."""
        if not isinstance(method, str) or method not in self._RPC_METHODS:
            raise ValueError(f"collective_rpc: {method!r} is not supported by refit (one in-process worker; "
                             f"methods: {', '.join(self._RPC_METHODS)})")
        del timeout
        return [getattr(self, method)(*args, **(kwargs or {}))]

    def _weight_sync(self):
        if self._sync is None:
            self._sync = _refit.WeightSync(self.engine)
        return self._sync

    def sleep(self, level: int = 1) -> int:
        """vLLM's sleep: the KV cache's memory (level 2: the weights' too) goes back to the OS.

        Needs LLM(enable_sleep_mode=True) and no unfinished request. After level 2 every
        weight must be sent again (update_weights_*) before generating. Returns the bytes freed.
        """
        if not self._sleep_mode:
            raise ValueError("sleep: the LLM was not created with enable_sleep_mode=True")
        return self.scheduler.sleep(level)

    def wake_up(self, tags: Optional[List[str]] = None) -> None:
        if not self._sleep_mode:
            raise ValueError("wake_up: the LLM was not created with enable_sleep_mode=True")
        if tags is not None:
            raise ValueError("wake_up: tags (waking weights and KV cache separately) are not supported by refit; "
                             "the weights come back through update_weights_*")
        self.scheduler.wake_up()

    def close(self) -> None:
        """Stops the Scheduler's loop (unfinished requests end with "abort")."""
        self.scheduler.close()

    # ---- internals ----

    def _prompt_list(self, prompts, prompt_token_ids) -> List[Any]:
        if prompt_token_ids is not None:
            if prompts is not None:
                raise ValueError("generate: give prompts or prompt_token_ids, not both")
            ids = list(prompt_token_ids)
            if ids and all(_is_token(t) for t in ids):
                return [{"prompt_token_ids": ids}]
            return [{"prompt_token_ids": list(x)} for x in ids]
        if prompts is None:
            raise ValueError("generate: no prompts")
        if isinstance(prompts, (str, dict)):
            return [prompts]
        items = list(prompts)
        if items and all(_is_token(t) for t in items):
            raise TypeError("generate: a bare list of ints is ambiguous; pass {'prompt_token_ids': [...]} "
                            "or prompt_token_ids=[...]")
        return items

    def _new_request(self, request_id: Optional[str], prompt: Any, params: SamplingParams) -> _RequestState:
        if not isinstance(params, SamplingParams):
            raise TypeError(f"sampling params must be refit.SamplingParams, got {type(params).__name__}")
        params._verify()  # fields may have been set since construction
        params = params._snapshot()  # the request keeps the values it was submitted with
        text = None
        if isinstance(prompt, str):
            text = prompt
        elif isinstance(prompt, dict):
            extra = sorted(set(prompt) - {"prompt", "prompt_token_ids"})
            if extra:
                raise ValueError(f"prompt: {', '.join(extra)} not supported by refit (text-only models)")
            if "prompt_token_ids" in prompt:
                ids = prompt["prompt_token_ids"]
                text = prompt.get("prompt")
            elif "prompt" in prompt:
                text = prompt["prompt"]
            else:
                raise ValueError("prompt: a dict needs 'prompt' or 'prompt_token_ids'")
        else:
            raise TypeError(f"prompt: expected a string or a dict, got {type(prompt).__name__}")
        if isinstance(prompt, str) or (isinstance(prompt, dict) and "prompt_token_ids" not in prompt):
            if not isinstance(text, str):
                raise TypeError("prompt: 'prompt' must be a string")
            if not self._has_tokenizer:
                raise ValueError("prompt: this model has no tokenizer; pass {'prompt_token_ids': [...]}")
            ids = self.engine.encode(text)
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        ids = list(ids)
        if not ids:
            raise ValueError("prompt_token_ids: the prompt is empty")
        for i, t in enumerate(ids):
            if not _is_token(t) or not 0 <= t < self._vocab:
                raise ValueError(f"prompt_token_ids: {t!r} at index {i} is not a token id of this model "
                                 f"(0..{self._vocab - 1})")
        if params.truncate_prompt_tokens is not None:
            ids = ids[-params.truncate_prompt_tokens:]
        room = self.max_model_len - len(ids)
        if room < 1:
            raise ValueError(f"prompt_token_ids: the prompt ({len(ids)} tokens) leaves no room in max_model_len "
                             f"({self.max_model_len})")
        # As vLLM: a sequence stops ("length") at max_model_len whatever max_tokens says.
        max_tokens = room if params.max_tokens is None else min(params.max_tokens, room)
        if params.logprobs is not None and params.logprobs > self._vocab:
            raise ValueError(f"SamplingParams.logprobs must be <= the vocabulary ({self._vocab}), "
                             f"got {params.logprobs}")
        if request_id is None:
            request_id = str(next(self._ids))
        return _RequestState(self, request_id, text, ids, params, max_tokens)

    def _submit(self, req: _RequestState, consumer: _Consumer) -> None:
        released = self.scheduler.released_weights
        if released:  # sleep(level=2): the values are gone until every weight is sent again
            raise ValueError(f"generate: {len(released)} weights were released by sleep(level=2) and not sent "
                             f"again (e.g. {released[0]}); {_SEND_AGAIN}")
        with self._lock:
            if req.request_id in self._live:
                raise ValueError(f"request_id {req.request_id!r} is already in flight")
            self._live[req.request_id] = req
        try:
            for j, s in enumerate(req.samples):
                s.handle = self.scheduler.submit(req.prompt_ids, req.fields(j))
        except BaseException:
            req.cancel()
            self._retire(req)
            raise
        consumer.add(req)

    def _retire(self, req: _RequestState) -> None:
        with self._lock:
            if self._live.get(req.request_id) is req:
                del self._live[req.request_id]

    def _seeds(self, params: SamplingParams) -> List[int]:
        if params.seed is not None:  # sample j of n draws from seed + j
            return [(params.seed + j) % 2**64 for j in range(params.n)]
        with self._lock:
            return [self._seed_rng.getrandbits(64) for _ in range(params.n)]

    def _routing_array(self, flat: List[int]) -> Any:
        """Flat routed expert ids as [positions, moe layers, k] (numpy int32, else nested lists)."""
        layers, k = self._routing_shape
        try:
            import numpy as np
        except ImportError:  # the ids per position, per layer
            per = layers * k
            return [[flat[p + l * k: p + (l + 1) * k] for l in range(layers)] for p in range(0, len(flat), per)]
        return np.asarray(flat, dtype=np.int32).reshape(-1, layers, k)

    def _top_wanted(self, logprobs: Optional[int]) -> int:
        if logprobs is None:
            return 0
        if logprobs == -1:
            return self._vocab
        return logprobs

    def _detokenizer(self, params: SamplingParams, prompt_ids: List[int]):
        # Primed with the prompt's last tokens (their text discarded), so the output's first
        # piece keeps its leading space as it reads after the prompt (vLLM's incremental
        # detokenizer starts from the prompt too).
        d = _refit.Detokenizer(self.engine, params.skip_special_tokens)
        for t in prompt_ids[-8:]:
            d.push(t)
        return d

    def _piece(self, token: int) -> Optional[str]:
        if not self._has_tokenizer:
            return None
        piece = self._pieces.get(token)
        if piece is None:
            if not hasattr(self, "_piece_decoder"):
                self._piece_decoder = _refit.Detokenizer(self.engine, False)
            piece = self._pieces[token] = self._piece_decoder.piece(token)
        return piece

    def _logprob_dict(self, token: int, logprob: float, rank, top, k: Optional[int]) -> Dict[int, Logprob]:
        # vLLM's layout: the sampled token first, then the k most likely (rank order).
        k = self._vocab if k == -1 else (k or 0)
        if rank is None:  # a Scheduler without ranks: known when the token is in the top list
            rank = next((i + 1 for i, (t, _) in enumerate(top) if t == token), None)
        d = {token: Logprob(logprob, rank, self._piece(token))}
        for i, (t, lp) in enumerate(top[:k]):
            if t not in d:
                d[t] = Logprob(lp, i + 1, self._piece(t))
        return d


def _dtype_name(d) -> Any:
    """A torch dtype (torch.bfloat16) or its name; anything else is passed on for the C++ to refuse by name."""
    if isinstance(d, str):
        return d
    if type(d).__name__ == "dtype":  # torch.dtype / numpy.dtype: str() is its name
        return str(d)
    return d


def _shape_list(s) -> Any:
    if hasattr(s, "tolist") and not isinstance(s, (list, tuple)):
        s = s.tolist()
    if isinstance(s, (list, tuple)):  # torch.Size is a tuple of ints
        return [int(x) if hasattr(x, "__index__") and not isinstance(x, bool) else x for x in s]
    return s


class _Tokenizer:
    """What LLM.get_tokenizer() gives: encode/decode on the engine's own tokenizer."""

    def __init__(self, engine, eos):
        self._engine = engine
        self.eos_token_id = eos

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return self._engine.encode(text, add_special_tokens)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self._engine.decode(list(ids))

    def __call__(self, text: str, add_special_tokens: bool = True):
        return {"input_ids": self.encode(text, add_special_tokens)}


def _is_token(t) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)


def _final_output(req: _RequestState) -> RequestOutput:
    """The whole output (LLM.generate returns cumulative outputs whatever output_kind says, as vLLM)."""
    return req.output(delta=False)


def _progress(total: int):
    try:
        from tqdm import tqdm  # optional, as in vLLM
    except ImportError:
        return None
    return tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)


# ---------------------------------------------------------------------------------------
# LLMEngine: vLLM's add_request / step / abort_request loop
# ---------------------------------------------------------------------------------------


class LLMEngine:
    """``llm.llm_engine``: vLLM's engine-loop methods over the same Scheduler.

    add_request() queues at once; step() waits (GIL released) until some request made
    progress and returns their RequestOutputs (a finished one once, then it is gone).
    The Scheduler keeps stepping on its own thread whether or not step() is called.
    """

    def __init__(self, llm: LLM):
        self._llm = llm
        self._consumer = _Consumer()
        self._mine: Dict[str, _RequestState] = {}
        self._lock = threading.Lock()
        self._step_lock = threading.Lock()

    def add_request(self, request_id: str, prompt: Any, params: SamplingParams, arrival_time: Optional[float] = None,
                    lora_request: Any = None, priority: int = 0, **kwargs) -> None:
        if lora_request is not None:
            raise ValueError("add_request: lora_request is not supported by refit")
        if priority:
            raise ValueError("add_request: priority is not supported by refit (FIFO)")
        if kwargs:
            raise TypeError(f"add_request: unexpected argument(s) {', '.join(sorted(kwargs))}")
        req = self._llm._new_request(str(request_id), prompt, params)
        with self._lock:  # step() pops finished requests under the same lock
            self._llm._submit(req, self._consumer)
            self._mine[req.request_id] = req

    def step(self, timeout: Optional[float] = None) -> List[RequestOutput]:
        """Outputs of the requests that progressed; waits up to `timeout` seconds (None: until
        one does). Returns [] at once when no request added here is unfinished. One thread
        steps at a time (add_request may come from others)."""
        with self._step_lock:
            outs: List[RequestOutput] = []
            while not outs:
                with self._lock:
                    if not self._mine:
                        return outs
                for r in self._consumer.wait(3600.0 if timeout is None else timeout):
                    if r.params.output_kind == RequestOutputKind.FINAL_ONLY and not r.finished:
                        continue
                    outs.append(r.output())
                    if r.finished:
                        with self._lock:
                            self._mine.pop(r.request_id, None)
                        self._llm._retire(r)
                        r.raise_error()  # the forward pass failed: as vLLM's step(), raise
                if timeout is not None:
                    break
            return outs

    def abort_request(self, request_id: Union[str, Iterable[str]]) -> None:
        self._llm.abort_request(request_id)

    def get_num_unfinished_requests(self) -> int:
        return self._llm.get_num_unfinished_requests()

    def has_unfinished_requests(self) -> bool:
        return self._llm.has_unfinished_requests()

    def reset_prefix_cache(self) -> bool:
        return self._llm.reset_prefix_cache()

    def get_tokenizer(self):
        return self._llm.get_tokenizer()

    def __getattr__(self, name: str):
        # Everything else is the refit.Engine's (weights, updates, logits, config).
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._llm.engine, name)


# ---------------------------------------------------------------------------------------
# AsyncLLMEngine: async generate() streams RequestOutputs
# ---------------------------------------------------------------------------------------


class EngineArgs:
    """vLLM's EngineArgs / AsyncEngineArgs as a holder: EngineArgs(model, **engine_args).

    The arguments are checked when the engine is built (LLM's)."""

    def __init__(self, model: Any = None, **engine_args):
        self.model = model
        self.engine_args = engine_args


AsyncEngineArgs = EngineArgs


class AsyncLLMEngine:
    """vLLM's AsyncLLMEngine shape: ``async for out in engine.generate(prompt, params, request_id)``.

    Any number of generate() calls run concurrently on the Scheduler's loop thread. One
    pump thread waits for events (GIL released) and hands them to each request's asyncio
    queue on the loop that called generate(); the request's state is updated there. A
    consumer that stops iterating (break, task cancelled) aborts its request.

    AsyncLLMEngine(model, **engine_args) builds an LLM; AsyncLLMEngine(llm=...) serves an
    existing one (same engine, same weights, same request ids).
    """

    def __init__(self, model: Any = None, *, llm: Optional[LLM] = None, **engine_args):
        if llm is not None and (model is not None or engine_args):
            raise ValueError("AsyncLLMEngine: give an llm or a model with engine arguments, not both")
        self.llm = llm if llm is not None else LLM(model, **engine_args)
        self._set = _refit.RequestSet()
        self._routes: Dict[int, tuple] = {}  # scheduler id -> (sample, loop, queue)
        self._lock = threading.Lock()
        self._pump: Optional[threading.Thread] = None
        self._closed = False

    @classmethod
    def from_llm(cls, llm: LLM) -> "AsyncLLMEngine":
        return cls(llm=llm)

    @classmethod
    def from_engine_args(cls, engine_args: Union[EngineArgs, Dict[str, Any]], **_ignored_usage_args):
        if isinstance(engine_args, dict):
            args = dict(engine_args)
            return cls(args.pop("model", None), **args)
        return cls(engine_args.model, **engine_args.engine_args)

    @property
    def engine(self) -> "LLMEngine":
        """vLLM's ``AsyncLLMEngine.engine``: the LLMEngine (reset_prefix_cache,
        get_num_unfinished_requests, ...); other attributes are the refit.Engine's
        (update_weights_from_tensors, logits, weight_version, state_dict, ...)."""
        return self.llm.llm_engine

    @property
    def refit_engine(self):
        """The refit.Engine (weights, updates, logits)."""
        return self.llm.engine

    async def generate(self, prompt: Any, sampling_params: SamplingParams, request_id: str,
                       lora_request: Any = None, priority: int = 0, **kwargs):
        if lora_request is not None:
            raise ValueError("generate: lora_request is not supported by refit")
        if priority:
            raise ValueError("generate: priority is not supported by refit (FIFO)")
        if kwargs:
            raise TypeError(f"generate: unexpected argument(s) {', '.join(sorted(kwargs))}")
        if self._closed:
            raise RuntimeError("AsyncLLMEngine is shut down")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        req = self.llm._new_request(str(request_id), prompt, sampling_params)
        consumer = _AsyncRoute(self, loop, queue)
        self.llm._submit(req, consumer)
        self._start_pump()
        try:
            while True:
                sample, ev = await queue.get()
                req.apply(sample, ev)
                # Everything already queued goes into the same output.
                while not queue.empty():
                    sample, ev = queue.get_nowait()
                    req.apply(sample, ev)
                if req.finished:
                    self.llm._retire(req)
                    req.raise_error()
                    yield req.output()  # DELTA: what is new; else everything
                    return
                if sampling_params.output_kind != RequestOutputKind.FINAL_ONLY:
                    yield req.output()
        finally:
            if not req.finished:
                req.cancel()  # the consumer left early: free the request's blocks
            self.llm._retire(req)

    async def abort(self, request_id: Union[str, Iterable[str]]) -> None:
        self.llm.abort_request(request_id)

    def get_num_unfinished_requests(self) -> int:
        return self.llm.get_num_unfinished_requests()

    def has_unfinished_requests(self) -> bool:
        return self.llm.has_unfinished_requests()

    async def reset_prefix_cache(self) -> bool:
        return self.llm.reset_prefix_cache()

    async def sleep(self, level: int = 1) -> int:
        return self.llm.sleep(level)

    async def wake_up(self, tags: Optional[List[str]] = None) -> None:
        self.llm.wake_up(tags)

    async def update_weights_from_tensors(self, tensors, *, mode: str = "drain", check_finite: bool = True,
                                          ignore_unknown_tensors: bool = False) -> int:
        """LLM.update_weights_from_tensors off the event loop (requests keep streaming)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, lambda: self.llm.update_weights_from_tensors(tensors, mode=mode, check_finite=check_finite,
                                                               ignore_unknown_tensors=ignore_unknown_tensors))

    # Weight sync from a torch.distributed trainer (LLM's methods, off the event loop: the
    # join and the receive block on the trainer while requests keep streaming).
    async def init_weights_update_group(self, *args, **kwargs) -> str:
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.llm.init_weights_update_group(*args, **kwargs))

    async def update_weights_from_distributed(self, *args, **kwargs) -> int:
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.llm.update_weights_from_distributed(*args, **kwargs))

    async def destroy_weights_update_group(self, group_name: str = "weight_update_group") -> None:
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.llm.destroy_weights_update_group(group_name))

    def shutdown(self) -> None:
        """Stops the pump thread (the LLM stays usable)."""
        self._closed = True
        self._set.interrupt()
        if self._pump is not None:
            self._pump.join()
            self._pump = None

    def _start_pump(self) -> None:
        with self._lock:
            if self._pump is None:
                self._pump = threading.Thread(target=self._run_pump, name="refit-async-pump", daemon=True)
                self._pump.start()

    def _run_pump(self) -> None:
        while not self._closed:
            for ev in self._set.wait(0.25):  # GIL released while waiting
                with self._lock:
                    route = self._routes.get(ev[0])
                    if route is not None and ev[1] == "finished":
                        del self._routes[ev[0]]
                if route is None:
                    continue
                sample, loop, queue = route
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, (sample, ev))
                except RuntimeError:  # that event loop is closed: nobody will read
                    sample.req.cancel()


class _AsyncRoute:
    """Routes one async request's samples through the engine's shared RequestSet."""

    def __init__(self, engine: AsyncLLMEngine, loop, queue):
        self.engine, self.loop, self.queue = engine, loop, queue

    def add(self, req: _RequestState) -> None:
        with self.engine._lock:
            for s in req.samples:
                self.engine._routes[s.handle.id] = (s, self.loop, self.queue)
        for s in req.samples:
            self.engine._set.add(s.handle)
        # A request abandoned early keeps its route until the Scheduler's "finished" (so the
        # RequestSet lets go of it); its last events go to a queue nobody reads.
