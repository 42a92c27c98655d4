"""refit.LLM / SamplingParams / AsyncLLMEngine: vLLM's in-process API on the Scheduler.

What these pin down: the OpenRLHF calls run unchanged and read what they expect; greedy
output equals Engine.generate; every reported logprob is, bit for bit, the double
log-softmax of the engine's teacher-forced logits row (cast to f32, as scheduler.cpp
does); concurrent requests (threads, asyncio) give exactly the tokens they give alone;
abort ends a request with "abort" and frees it; a weight update between generations
shows in weight_versions; bad parameters raise ValueError naming the field.
"""
import asyncio
import math
import pathlib
import re
import struct
import threading
import time

import pytest
import torch

import refit
from conftest import STORIES_HF, SHARED, require

# micro-llama (random weights, 32000-token vocabulary) for exactness; stories260K (a real
# story model, so text, stops and EOS mean something) for the rest, and for batch
# invariance with an FFN width (172) that is not a multiple of the SIMD width.
MICRO_GGUF = SHARED / "oracle" / "llamacpp" / "llama-f32" / "micro-llama-f32-s1.gguf"
STORIES_GGUF = SHARED / "oracle" / "stories260K" / "stories260K.gguf"  # has a tokenizer
PROMPTS = [[1, 9038, 2501, 263, 931], [1, 9038, 2501], [1, 450, 4996, 17354, 1701, 29916], [1, 15043, 3186],
           [1, 450, 2217, 11203]]
STORY_PROMPTS = [[1, 403, 407], [1, 403, 407, 261, 378], [1, 306, 350, 261], [1, 450]]


@pytest.fixture(scope="module")
def llm():
    model = refit.LLM(str(require(MICRO_GGUF)), seed=0)
    yield model
    model.close()


@pytest.fixture(scope="module")
def stories_llm():
    model = refit.LLM(str(require(STORIES_GGUF)), seed=0)
    yield model
    model.close()


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def log_softmax_f32(row):
    """scheduler.cpp's score_row: max, then sum(exp(x - max)) in index order, all in double;
    the result is cast to f32."""
    values = [float(v) for v in row.tolist()]
    mx = max(values)
    total = 0.0
    for v in values:
        total += math.exp(v - mx)
    lse = mx + math.log(total)
    return [f32(v - lse) for v in values]


def supported(field):
    return field in refit._refit.Scheduler.supported_fields


def wait_until(cond, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


# ---- OpenRLHF's use of vLLM, replayed ------------------------------------------------


def test_openrlhf_replay(llm):
    """The calls as OpenRLHF makes them, with refit in place of vllm:
    openrlhf/trainer/ray/vllm_engine.py — create_vllm_engines() builds LLMRayActor with these
    engine arguments and LLMRayActor.__init__ pops num_actors then calls LLM(*args, **kwargs);
    LLMRayActor.add_requests() calls self.llm.generate(sampling_params=..., prompt_token_ids=...);
    openrlhf/trainer/ppo_utils/experience_maker.py — SamplesGenerator._generate_vllm() builds
    SamplingParams as below and reads prompt_token_ids, outputs[0].token_ids and
    outputs[0].logprobs[i][response_ids[i]].logprob (enable_vllm_is_correction)."""
    pretrain = str(require(MICRO_GGUF))
    kwargs = dict(
        model=pretrain,
        enforce_eager=True,
        worker_cls="openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap",
        tensor_parallel_size=1,
        seed=42 + 0,
        distributed_executor_backend="uni",
        max_model_len=256,
        enable_prefix_caching=True,
        dtype="bfloat16",
        trust_remote_code=True,
        num_actors=1,
        gpu_memory_utilization=0.5,
        enable_sleep_mode=False,
    )
    kwargs.pop("num_actors")  # LLMRayActor.__init__
    with pytest.warns(UserWarning, match="dtype='bfloat16'"):
        actor_llm = refit.LLM(**kwargs)
    assert actor_llm.ignored_engine_args["worker_cls"].endswith("WorkerWrap")

    generate_kwargs = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 24, "min_new_tokens": 1}
    make = lambda: refit.SamplingParams(  # noqa: E731  (experience_maker.py, _generate_vllm)
        temperature=generate_kwargs.get("temperature", 1.0),
        top_p=generate_kwargs.get("top_p", 1.0),
        top_k=generate_kwargs.get("top_k", -1),
        max_tokens=generate_kwargs.get("max_new_tokens", 1024),
        min_tokens=generate_kwargs.get("min_new_tokens", 1),
        skip_special_tokens=generate_kwargs.get("skip_special_tokens", False),
        include_stop_str_in_output=True,
        logprobs=1,
    )
    if not supported("min_tokens"):
        with pytest.raises(ValueError, match="min_tokens"):
            make()
        generate_kwargs["min_new_tokens"] = 0
    sampling_params = make()

    n_samples_per_prompt = 4
    all_prompt_token_ids = sum([[p] * n_samples_per_prompt for p in PROMPTS[:3]], [])
    responses = actor_llm.generate(sampling_params=sampling_params, prompt_token_ids=all_prompt_token_ids)
    assert len(responses) == len(all_prompt_token_ids)

    engine = actor_llm.engine
    max_response_length = generate_kwargs["max_new_tokens"]
    for output, prompt in zip(responses, all_prompt_token_ids):
        assert output.finished and output.prompt_token_ids == prompt
        input_ids = list(output.prompt_token_ids) + list(output.outputs[0].token_ids)
        response_ids = list(output.outputs[0].token_ids)
        rollout_log_probs = []
        for i, logprob in enumerate(output.outputs[0].logprobs):
            rollout_log_probs.append(logprob[response_ids[i]].logprob)
        assert 1 <= len(response_ids) <= max_response_length
        assert output.outputs[0].finish_reason in ("stop", "length")
        # The rollout logprobs are the engine's own: teacher-forced logits, bit for bit.
        logits = engine.logits(input_ids[:-1])
        for i, token in enumerate(response_ids):
            assert rollout_log_probs[i] == log_softmax_f32(logits[len(prompt) - 1 + i])[token]
        assert output.outputs[0].weight_versions == [engine.weight_version] * len(response_ids)
    # Different seeds per sample: the four samples of a prompt are not all equal.
    first = [tuple(r.outputs[0].token_ids) for r in responses[:n_samples_per_prompt]]
    assert len(set(first)) > 1
    actor_llm.llm_engine.reset_prefix_cache()  # LLMRayActor.reset_prefix_cache
    assert actor_llm.get_num_unfinished_requests() == 0
    actor_llm.close()


# ---- exactness ------------------------------------------------------------------------


def test_greedy_equals_engine_generate(llm):
    params = refit.SamplingParams(temperature=0.0, max_tokens=40)
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
    for p, out in zip(PROMPTS, outs):
        ref = llm.engine.generate(p, max_tokens=40, temperature=0.0)
        assert out.outputs[0].token_ids == ref.ids, p
        assert out.outputs[0].finish_reason == ref.finish_reason
        # Random weights: byte tokens; bytes that are not UTF-8 read as U+FFFD on both sides.
        assert out.outputs[0].text == ref.text or out.outputs[0].text.lstrip() == ref.text.lstrip()
        assert out.request_id.isdigit() and out.prompt is None and out.prompt_token_ids == p


@pytest.mark.parametrize("temperature,seed", [(0.0, None), (1.0, 7)])
def test_logprobs_are_the_teacher_forced_log_softmax_bit_for_bit(llm, temperature, seed):
    k = 5
    prompt = PROMPTS[1]
    want_prompt = supported("prompt_logprobs_from")
    params = refit.SamplingParams(temperature=temperature, seed=seed, max_tokens=30, logprobs=k,
                                  prompt_logprobs=2 if want_prompt else None, ignore_eos=True)
    out = llm.generate({"prompt_token_ids": prompt}, params, use_tqdm=False)[0]
    c = out.outputs[0]
    tokens = c.token_ids
    assert len(tokens) == 30 and len(c.logprobs) == 30
    logits = llm.engine.logits(prompt + tokens[:-1])
    total = 0.0
    for i, token in enumerate(tokens):
        lp = log_softmax_f32(logits[len(prompt) - 1 + i])
        entry = c.logprobs[i]
        assert list(entry)[0] == token  # vLLM's order: the sampled token first
        assert entry[token].logprob == lp[token]
        order = sorted(range(len(lp)), key=lambda t: (-lp[t], t))
        if refit._refit.Scheduler.reports_rank or token in order[:k]:
            assert entry[token].rank == 1 + sum(v > lp[token] for v in lp)
        else:
            assert entry[token].rank is None  # unknown: outside the top k, and no rank from the Scheduler
        for r, t in enumerate(order[:k]):
            assert entry[t].logprob == lp[t] and entry[t].rank == r + 1
        assert set(entry) == set(order[:k]) | {token}
        assert entry[token].decoded_token == llm.engine.decode([token]) or entry[token].decoded_token
        total += entry[token].logprob
        if temperature == 0.0:
            assert token == order[0]
    assert c.cumulative_logprob == pytest.approx(total, abs=1e-9)
    if want_prompt:
        plogits = llm.engine.logits(prompt)
        assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(prompt)
        for pos in range(1, len(prompt)):
            lp = log_softmax_f32(plogits[pos - 1])
            assert out.prompt_logprobs[pos][prompt[pos]].logprob == lp[prompt[pos]]


def test_same_seed_same_tokens_and_n_samples(llm):
    params = refit.SamplingParams(temperature=1.0, seed=11, max_tokens=30, n=3, ignore_eos=True)
    a = llm.generate({"prompt_token_ids": PROMPTS[0]}, params, use_tqdm=False)[0]
    b = llm.generate({"prompt_token_ids": PROMPTS[0]}, params, use_tqdm=False)[0]
    assert [o.index for o in a.outputs] == [0, 1, 2]
    assert [o.token_ids for o in a.outputs] == [o.token_ids for o in b.outputs]
    assert len({tuple(o.token_ids) for o in a.outputs}) == 3  # seed + j per sample
    # Sample j of n equals a single request seeded seed + j.
    one = refit.SamplingParams(temperature=1.0, seed=12, max_tokens=30, ignore_eos=True)
    assert llm.generate({"prompt_token_ids": PROMPTS[0]}, one, use_tqdm=False)[0].outputs[0].token_ids == \
        a.outputs[1].token_ids


# ---- concurrency and batch invariance -------------------------------------------------


def _mixed_params():
    return [refit.SamplingParams(temperature=0.0 if i % 2 else 0.9, seed=100 + i, max_tokens=24 + 3 * i,
                                 logprobs=2, ignore_eos=True) for i in range(len(PROMPTS))]


def _alone(llm):
    return [llm.generate({"prompt_token_ids": p}, sp, use_tqdm=False)[0].outputs[0]
            for p, sp in zip(PROMPTS, _mixed_params())]


def _same(a, b):
    assert a.token_ids == b.token_ids
    assert [{t: l.logprob for t, l in d.items()} for d in a.logprobs] == \
        [{t: l.logprob for t, l in d.items()} for d in b.logprobs]


def test_one_batched_call_equals_each_request_alone(llm):
    alone = _alone(llm)
    together = llm.generate([{"prompt_token_ids": p} for p in PROMPTS] * 3, _mixed_params() * 3, use_tqdm=False)
    for i, out in enumerate(together):
        _same(out.outputs[0], alone[i % len(PROMPTS)])


def test_threads_generate_concurrently_with_the_tokens_they_get_alone(llm):
    alone = _alone(llm)
    results, errors = {}, []

    def worker(w):
        try:
            i = w % len(PROMPTS)
            results[w] = llm.generate({"prompt_token_ids": PROMPTS[i]}, _mixed_params()[i], use_tqdm=False)[0]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    # The GIL is free while they wait: this thread keeps counting.
    ticks = 0
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(10)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        ticks += 1
        time.sleep(0.001)
    assert not errors
    assert ticks > 5
    for w, out in results.items():
        _same(out.outputs[0], alone[w % len(PROMPTS)])
    assert llm.get_num_unfinished_requests() == 0


def test_asyncio_generate_streams_concurrently_with_the_tokens_they_get_alone(llm):
    alone = _alone(llm)
    engine = refit.AsyncLLMEngine.from_llm(llm)

    async def one(w):
        i = w % len(PROMPTS)
        seen, last = 0, None
        async for out in engine.generate({"prompt_token_ids": PROMPTS[i]}, _mixed_params()[i], request_id=f"a{w}"):
            assert len(out.outputs[0].token_ids) >= seen  # cumulative
            seen = len(out.outputs[0].token_ids)
            last = out
        return w, last

    async def main():
        return await asyncio.gather(*(one(w) for w in range(12)))

    results = asyncio.run(main())
    for w, out in results:
        assert out.finished and out.request_id == f"a{w}"
        _same(out.outputs[0], alone[w % len(PROMPTS)])
    assert engine.get_num_unfinished_requests() == 0
    engine.shutdown()


def test_async_delta_and_final_only_outputs(llm):
    engine = refit.AsyncLLMEngine.from_llm(llm)
    full = llm.generate({"prompt_token_ids": PROMPTS[0]}, refit.SamplingParams(temperature=0, max_tokens=12,
                                                                                ignore_eos=True), use_tqdm=False)[0]

    async def collect(kind):
        outs = []
        p = refit.SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, output_kind=kind)
        async for out in engine.generate({"prompt_token_ids": PROMPTS[0]}, p, request_id=f"k{kind.name}"):
            outs.append(out)
        return outs

    delta = asyncio.run(collect(refit.RequestOutputKind.DELTA))
    assert sum((o.outputs[0].token_ids for o in delta), []) == full.outputs[0].token_ids
    assert "".join(o.outputs[0].text for o in delta) == full.outputs[0].text
    final = asyncio.run(collect(refit.RequestOutputKind.FINAL_ONLY))
    assert len(final) == 1 and final[0].outputs[0].token_ids == full.outputs[0].token_ids
    engine.shutdown()


# ---- abort ----------------------------------------------------------------------------


def test_abort_mid_generation_frees_the_request(llm):
    params = refit.SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True)
    llm.add_request("long", {"prompt_token_ids": PROMPTS[0]}, params)
    llm.add_request("short", {"prompt_token_ids": PROMPTS[1]}, refit.SamplingParams(temperature=0, max_tokens=4))
    assert llm.get_num_unfinished_requests() == 2 and llm.has_unfinished_requests()
    produced = 0
    finished = {}
    while produced < 5:
        for out in llm.step():
            if out.request_id == "long":
                produced = len(out.outputs[0].token_ids)
            if out.finished:
                finished[out.request_id] = out
    llm.abort_request("long")
    while llm.llm_engine.has_unfinished_requests():
        for out in llm.step(timeout=5.0):
            if out.finished:
                finished[out.request_id] = out
    assert finished["long"].outputs[0].finish_reason == "abort"
    assert 5 <= len(finished["long"].outputs[0].token_ids) < 500
    assert finished["short"].outputs[0].finish_reason in ("length", "stop")
    assert llm.get_num_unfinished_requests() == 0
    assert llm.step() == []
    assert wait_until(lambda: llm.scheduler.stats()["running"] == 0 and llm.scheduler.stats()["waiting"] == 0)
    assert wait_until(lambda: llm.scheduler.stats()["kv_blocks_used"] == 0)


def test_async_abort_and_a_consumer_that_leaves(llm):
    engine = refit.AsyncLLMEngine.from_llm(llm)
    params = refit.SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True)

    async def aborted():
        last = None
        async for out in engine.generate({"prompt_token_ids": PROMPTS[2]}, params, request_id="x"):
            last = out
            if len(out.outputs[0].token_ids) >= 3 and engine.get_num_unfinished_requests():
                await engine.abort("x")
        return last

    async def leaves():
        async for out in engine.generate({"prompt_token_ids": PROMPTS[3]}, params, request_id="y"):
            if len(out.outputs[0].token_ids) >= 3:
                break

    last = asyncio.run(aborted())
    assert last.finished and last.outputs[0].finish_reason == "abort"
    assert len(last.outputs[0].token_ids) < 500
    asyncio.run(leaves())
    assert engine.get_num_unfinished_requests() == 0
    assert wait_until(lambda: llm.scheduler.stats()["running"] == 0 and llm.scheduler.stats()["kv_blocks_used"] == 0)
    engine.shutdown()


# ---- weight updates -------------------------------------------------------------------


def test_weight_update_between_generations_changes_weight_versions():
    llm = refit.LLM(str(require(MICRO_GGUF)))
    params = refit.SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    prompts = [{"prompt_token_ids": p} for p in PROMPTS[:3]]
    before = llm.generate(prompts, params, use_tqdm=False)
    v1 = llm.weight_version
    assert all(o.outputs[0].weight_versions == [v1] * 20 for o in before)

    original = {n: t.clone() for n, t in llm.engine.state_dict().items()}
    noisy = {n: t + 0.05 * torch.randn(t.shape, generator=torch.Generator().manual_seed(0))
             for n, t in original.items()}
    v2 = llm.update_weights_from_tensors(noisy)
    assert v2 == llm.weight_version > v1
    after = llm.generate(prompts, params, use_tqdm=False)
    assert all(o.outputs[0].weight_versions == [v2] * 20 for o in after)
    assert any(a.outputs[0].token_ids != b.outputs[0].token_ids for a, b in zip(after, before))

    # Back to the original weights (straight through the Engine): the same tokens again,
    # nothing computed on the noisy weights (prefix cache) leaks in.
    v3 = llm.engine.update_weights_from_tensors(original)
    again = llm.generate(prompts, params, use_tqdm=False)
    for a, b in zip(again, before):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert a.outputs[0].weight_versions == [v3] * 20
    llm.close()


def test_a_drained_update_during_generation_keeps_one_version_per_output():
    llm = refit.LLM(str(require(MICRO_GGUF)))
    state = {n: t.clone() for n, t in llm.engine.state_dict().items()}
    params = refit.SamplingParams(temperature=0.0, max_tokens=120, ignore_eos=True)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "outs", llm.generate([{"prompt_token_ids": p} for p in PROMPTS] * 4, params, use_tqdm=False)))
    t.start()
    assert wait_until(lambda: llm.scheduler.stats()["generated_tokens"] > 0)
    version = llm.update_weights_from_tensors(state)  # drain: started requests finish first
    t.join()
    versions = {tuple(set(o.outputs[0].weight_versions)) for o in box["outs"]}
    assert all(len(v) == 1 for v in versions)
    assert llm.weight_version == version
    assert llm.scheduler.stats()["refits"] == 1
    llm.close()


# ---- stops and text -------------------------------------------------------------------


def test_stop_strings_stop_token_ids_and_eos(stories_llm):
    llm = stories_llm
    base = llm.generate("Once upon a time", refit.SamplingParams(temperature=0, max_tokens=60), use_tqdm=False)[0]
    text = base.outputs[0].text
    assert base.prompt == "Once upon a time" and base.prompt_token_ids == llm.engine.encode("Once upon a time")
    stop = "little"
    assert stop in text
    cut = llm.generate("Once upon a time", refit.SamplingParams(temperature=0, max_tokens=60, stop=[stop]),
                       use_tqdm=False)[0].outputs[0]
    assert cut.finish_reason == "stop" and cut.stop_reason == stop
    assert cut.text == text[: text.index(stop)]
    kept = llm.generate("Once upon a time", refit.SamplingParams(temperature=0, max_tokens=60, stop=stop,
                                                                 include_stop_str_in_output=True),
                        use_tqdm=False)[0].outputs[0]
    assert kept.text == text[: text.index(stop) + len(stop)]
    assert kept.token_ids == cut.token_ids == base.outputs[0].token_ids[: len(cut.token_ids)]

    # A stop token id: included in token_ids, stop_reason is the id.
    target = base.outputs[0].token_ids[4]
    at = base.outputs[0].token_ids.index(target)
    out = llm.generate("Once upon a time", refit.SamplingParams(temperature=0, max_tokens=60,
                                                                stop_token_ids=[target]), use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == target
    assert out.token_ids == base.outputs[0].token_ids[: at + 1]
    if supported("min_tokens"):
        later = llm.generate("Once upon a time", refit.SamplingParams(temperature=0, max_tokens=60, min_tokens=at + 1,
                                                                      stop_token_ids=[target]),
                             use_tqdm=False)[0].outputs[0]
        assert len(later.token_ids) > at + 1 and target not in later.token_ids[: at + 1]

    # EOS: greedy until the end of the story; stop_reason None; ignore_eos runs to max_tokens.
    story = llm.generate({"prompt_token_ids": [1]}, refit.SamplingParams(temperature=0, max_tokens=400),
                         use_tqdm=False)[0].outputs[0]
    eos = llm.get_tokenizer().eos_token_id
    if story.finish_reason == "stop":
        assert story.token_ids[-1] == eos and story.stop_reason is None
        longer = llm.generate({"prompt_token_ids": [1]}, refit.SamplingParams(temperature=0, max_tokens=len(
            story.token_ids) + 5, ignore_eos=True), use_tqdm=False)[0].outputs[0]
        assert longer.finish_reason == "length" and len(longer.token_ids) == len(story.token_ids) + 5


def test_max_tokens_none_and_max_model_len_end_with_length():
    small = refit.LLM(str(require(STORIES_GGUF)), max_model_len=24)
    out = small.generate({"prompt_token_ids": STORY_PROMPTS[0]}, refit.SamplingParams(temperature=0, max_tokens=None,
                                                                                ignore_eos=True),
                         use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 24 - len(STORY_PROMPTS[0])
    with pytest.raises(ValueError, match="max_model_len"):
        small.generate({"prompt_token_ids": [1] * 24}, use_tqdm=False)
    small.close()


# ---- refusals -------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,field", [
    ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"min_p": 1.5}, "min_p"),
    ({"n": 0}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
    ({"logprobs": -2}, "logprobs"),
    ({"prompt_logprobs": -3}, "prompt_logprobs"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"presence_penalty": 3.0}, "presence_penalty"),
    ({"seed": -1}, "seed"),
    ({"stop": [""]}, "stop"),
    ({"stop_token_ids": [-4]}, "stop_token_ids"),
    ({"best_of": 3, "n": 2}, "best_of"),
    ({"bad_words": ["dog"]}, "bad_words"),
    ({"logits_processors": [lambda ids, logits: logits]}, "logits_processors"),
    ({"logit_bias": {3: 1.0}}, "logit_bias"),
    ({"allowed_token_ids": [1, 2]}, "allowed_token_ids"),
    ({"guided_decoding": {"regex": "a+"}}, "guided_decoding"),
    ({"spaces_between_special_tokens": False}, "spaces_between_special_tokens"),
    ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    ({"logprobs_mode": "softmax"}, "logprobs_mode"),
])
def test_bad_sampling_params_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        refit.SamplingParams(**kwargs)


@pytest.mark.parametrize("field,value,scheduler_field", [
    ("min_tokens", 2, "min_tokens"),
    ("frequency_penalty", 0.5, "frequency_penalty"),
    ("presence_penalty", 0.5, "presence_penalty"),
    ("prompt_logprobs", 1, "prompt_logprobs_from"),
])
def test_scheduler_dependent_fields_are_wired_or_refused_by_name(field, value, scheduler_field):
    if supported(scheduler_field):
        assert getattr(refit.SamplingParams(**{field: value}), field) == value
    else:
        with pytest.raises(ValueError, match=field):
            refit.SamplingParams(**{field: value})


def test_bad_prompts_and_engine_args(llm):
    with pytest.raises(ValueError, match="prompt_token_ids"):
        llm.generate({"prompt_token_ids": [1, 999999]}, use_tqdm=False)
    with pytest.raises(ValueError, match="prompt_token_ids"):
        llm.generate({"prompt_token_ids": []}, use_tqdm=False)
    with pytest.raises(ValueError, match="multi_modal_data"):
        llm.generate({"prompt_token_ids": [1], "multi_modal_data": {}}, use_tqdm=False)
    with pytest.raises(ValueError, match="sampling_params"):
        llm.generate([{"prompt_token_ids": [1]}] * 2, [refit.SamplingParams()] * 3, use_tqdm=False)
    with pytest.raises(ValueError, match="lora_request"):
        llm.generate({"prompt_token_ids": [1]}, lora_request=object(), use_tqdm=False)
    with pytest.raises(ValueError, match="logprobs"):
        llm.generate({"prompt_token_ids": [1]}, refit.SamplingParams(logprobs=100000), use_tqdm=False)
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        refit.LLM(str(require(STORIES_GGUF)), tensor_parallel_size=2)
    with pytest.raises(TypeError, match="no_such_arg"):
        refit.LLM(str(require(STORIES_GGUF)), no_such_arg=1)
    with pytest.raises(ValueError, match="max_model_len"):
        refit.LLM(str(require(STORIES_GGUF)), max_model_len=10**6)
    with pytest.raises(ValueError, match="max_num_seqs"):
        refit.LLM(str(require(STORIES_GGUF)), max_num_seqs=0)
    with pytest.raises(ValueError, match="mode"):
        llm.run_exclusive(lambda: None, mode="sideways")
    with pytest.raises(ValueError, match="already in flight"):
        llm.add_request("dup", {"prompt_token_ids": [1]}, refit.SamplingParams(max_tokens=300, ignore_eos=True))
        llm.add_request("dup", {"prompt_token_ids": [1]}, refit.SamplingParams(max_tokens=5))
    llm.abort_request("dup")
    while llm.step(timeout=5.0):
        pass
    assert llm.get_num_unfinished_requests() == 0
    # The Scheduler's own table refuses a field it does not know, by name.
    with pytest.raises(ValueError, match="beam_width"):
        llm.scheduler.submit([1], {"beam_width": 4})


def test_an_exception_in_the_exclusive_function_propagates_and_generation_goes_on(llm):
    def boom():
        raise KeyError("nope")

    with pytest.raises(KeyError, match="nope"):
        llm.run_exclusive(boom)
    out = llm.generate({"prompt_token_ids": PROMPTS[0]}, refit.SamplingParams(temperature=0, max_tokens=3),
                       use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) == 3


def test_an_existing_engine_is_served_as_is():
    engine = refit.Engine(str(require(STORIES_HF)))  # no tokenizer: token ids only, text ""
    llm = refit.LLM(engine)
    assert llm.engine is engine
    out = llm.generate({"prompt_token_ids": STORY_PROMPTS[0]}, refit.SamplingParams(temperature=0, max_tokens=8),
                       use_tqdm=False)[0].outputs[0]
    assert out.token_ids == engine.generate(STORY_PROMPTS[0], max_tokens=8).ids and out.text == ""
    with pytest.raises(ValueError, match="tokenizer"):
        llm.generate("Once upon a time", use_tqdm=False)
    llm.close()


# stories260K's FFN width (172) is not a multiple of the SIMD width: silu_mul's tail once
# made rows depend on the step's row count; now every row is computed the same way.
def test_stories260k_batch_invariance(stories_llm):
    sp = refit.SamplingParams(temperature=0, max_tokens=6, logprobs=0, ignore_eos=True)
    alone = [stories_llm.generate({"prompt_token_ids": p}, sp, use_tqdm=False)[0].outputs[0] for p in STORY_PROMPTS]
    together = stories_llm.generate([{"prompt_token_ids": p} for p in STORY_PROMPTS], sp, use_tqdm=False)
    for a, t in zip(alone, together):
        _same(a, t.outputs[0])
    engine = stories_llm.engine
    for p in STORY_PROMPTS:
        assert torch.equal(engine.logits(p), engine.logits(p + [5])[: len(p)])


def test_docs_example_runs(capsys):
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    code = re.search(r"```python\n(import refit +# was: from vllm.*?)```", doc, re.S).group(1)
    code = code.replace('"stories260K/stories260K.gguf"', repr(str(require(STORIES_GGUF))))
    scope = {}
    exec(compile(code, "docs/python.md", "exec"), scope)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 8 and all(line.split()[0] in ("stop", "length") for line in printed)
    assert scope["version"] == scope["llm"].weight_version == 2
    scope["llm"].close()


def test_a_retracted_request_restarts_and_ends_as_it_would_alone(llm):
    params = refit.SamplingParams(temperature=0.8, seed=5, max_tokens=150, ignore_eos=True, logprobs=0)
    alone = llm.generate({"prompt_token_ids": PROMPTS[2]}, params, use_tqdm=False)[0].outputs[0]
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "out", llm.generate({"prompt_token_ids": PROMPTS[2]}, params, use_tqdm=False)[0]))
    t.start()
    assert wait_until(lambda: llm.scheduler.stats()["running"] == 1)
    time.sleep(0.05)
    llm.scheduler.pause("retract")  # frees its KV; it re-runs from the prompt on resume
    llm.scheduler.resume()
    t.join()
    _same(box["out"].outputs[0], alone)


def _greedy_with_penalties(engine, prompt, n, frequency, presence):
    out = []
    for _ in range(n):
        row = engine.logits(prompt + out)[-1].clone()
        for tok in set(out):
            c = out.count(tok)
            row[tok] -= frequency * c + presence
        best = int(torch.argmax(row))  # ties: the lowest id, as refit's argmax
        out.append(best)
    return out


def test_frequency_and_presence_penalties_reach_the_sampler(llm):
    if not supported("frequency_penalty"):
        pytest.skip("this build's Scheduler has no OpenAI penalties")
    for frequency, presence in ((0.0, 1.5), (1.0, 0.0), (0.5, 0.5)):
        p = refit.SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, frequency_penalty=frequency,
                                 presence_penalty=presence)
        got = llm.generate({"prompt_token_ids": PROMPTS[0]}, p, use_tqdm=False)[0].outputs[0].token_ids
        assert got == _greedy_with_penalties(llm.engine, PROMPTS[0], 20, frequency, presence)


def test_processed_logprobs_mode_scales_by_the_temperature(llm):
    if not supported("logprob_mode"):
        pytest.skip("this build's Scheduler has no logprob modes")
    t = 0.7
    p = refit.SamplingParams(temperature=t, seed=3, max_tokens=10, ignore_eos=True, logprobs=1,
                             logprobs_mode="processed_logprobs")
    out = llm.generate({"prompt_token_ids": PROMPTS[0]}, p, use_tqdm=False)[0].outputs[0]
    raw = llm.generate({"prompt_token_ids": PROMPTS[0]},
                       refit.SamplingParams(temperature=t, seed=3, max_tokens=10, ignore_eos=True, logprobs=1),
                       use_tqdm=False)[0].outputs[0]
    assert out.token_ids == raw.token_ids  # the mode changes what is reported, not what is drawn
    logits = llm.engine.logits(PROMPTS[0] + out.token_ids[:-1])
    for i, token in enumerate(out.token_ids):
        row = logits[len(PROMPTS[0]) - 1 + i]
        assert out.logprobs[i][token].logprob == log_softmax_f32(row / t)[token]
        assert raw.logprobs[i][token].logprob == log_softmax_f32(row)[token]


def test_sleep_releases_the_kv_cache_and_wake_up_generates_the_same():
    if not refit._refit.Scheduler.can_sleep:
        with pytest.raises(ValueError, match="enable_sleep_mode"):
            refit.LLM(str(require(MICRO_GGUF)), enable_sleep_mode=True)
        return
    llm = refit.LLM(str(require(MICRO_GGUF)), enable_sleep_mode=True, kv_blocks=64)
    p = refit.SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    before = llm.generate({"prompt_token_ids": PROMPTS[0]}, p, use_tqdm=False)[0].outputs[0].token_ids
    assert llm.sleep(level=1) > 0
    llm.wake_up()
    assert llm.generate({"prompt_token_ids": PROMPTS[0]}, p, use_tqdm=False)[0].outputs[0].token_ids == before
    llm.add_request("busy", {"prompt_token_ids": PROMPTS[0]}, refit.SamplingParams(max_tokens=400, ignore_eos=True))
    assert wait_until(lambda: llm.scheduler.stats()["running"] == 1)
    with pytest.raises(ValueError, match="running"):
        llm.sleep()
    llm.abort_request("busy")
    while llm.step(timeout=5.0):
        pass
    with pytest.raises(ValueError, match="tags"):
        llm.wake_up(tags=["weights"])
    llm.close()
    plain = refit.LLM(str(require(MICRO_GGUF)))
    with pytest.raises(ValueError, match="enable_sleep_mode"):
        plain.sleep()
    plain.close()


def test_streamed_text_with_a_stop_string_is_never_taken_back(stories_llm):
    engine = refit.AsyncLLMEngine.from_llm(stories_llm)
    full = stories_llm.generate("Once upon a time", refit.SamplingParams(temperature=0, max_tokens=60),
                                use_tqdm=False)[0].outputs[0]
    stop = "little girl"
    assert stop in full.text

    async def deltas():
        p = refit.SamplingParams(temperature=0, max_tokens=60, stop=[stop], output_kind=refit.RequestOutputKind.DELTA)
        return [o async for o in engine.generate("Once upon a time", p, request_id="s")]

    outs = asyncio.run(deltas())
    assert "".join(o.outputs[0].text for o in outs) == full.text[: full.text.index(stop)]
    assert outs[-1].outputs[0].stop_reason == stop and outs[-1].finished
    assert all(stop not in o.outputs[0].text for o in outs)
    engine.shutdown()


def test_openrlhf_async_agent_replay():
    """openrlhf/trainer/ray/vllm_engine_async.py, LLMRayActorAsync: _init_vllm_engine() builds
    vllm.AsyncEngineArgs(*args, **kwargs) and AsyncLLMEngine.from_engine_args(); add_requests()
    runs one agent task per prompt (deepcopied sampling_params, at most 128 at once), each
    calling generate_async_func(state, sampling_params) — self.llm.generate(prompts,
    sampling_params, request_id) with a random uuid, keeping the final output — then sets
    sampling_params.max_tokens = max_length - (prompt + output tokens) for the next turn;
    reset_prefix_cache() calls self.llm.engine.reset_prefix_cache()."""
    import copy
    import uuid

    engine_args = refit.AsyncEngineArgs(model=str(require(STORIES_GGUF)), enforce_eager=True, tensor_parallel_size=1,
                                        seed=0, max_model_len=256, enable_prefix_caching=True, dtype="auto")
    with pytest.warns(UserWarning, match="enforce_eager"):
        llm = refit.AsyncLLMEngine.from_engine_args(engine_args)
    max_length = 48

    async def generate_async_func(prompts, sampling_params):
        request_id = str(uuid.uuid4())
        final_output = None
        async for request_output in llm.generate(prompts, sampling_params, request_id):
            final_output = request_output
        return final_output

    async def execute_agent(prompt, sampling_params):
        state, turns = prompt, []
        for _ in range(3):
            if sampling_params.max_tokens <= 0:
                break
            budget = sampling_params.max_tokens
            request_output = await generate_async_func(state, sampling_params)
            assert len(request_output.outputs[0].token_ids) <= budget
            action = request_output.outputs[0].text
            sampling_params.max_tokens = max_length - (
                len(request_output.prompt_token_ids) + len(request_output.outputs[0].token_ids))
            turns.append(request_output)
            state = state + action + " Then"
        return turns

    async def add_requests(sampling_params, prompts):
        semaphore = asyncio.Semaphore(128)

        async def with_semaphore(prompt, sp):
            async with semaphore:
                return await execute_agent(prompt, sp)

        tasks = [asyncio.create_task(with_semaphore(p, copy.deepcopy(sampling_params))) for p in prompts]
        return await asyncio.gather(*tasks)

    params = refit.SamplingParams(temperature=1.0, top_p=1.0, max_tokens=16, seed=1)
    prompts = ["Once upon a time", "The little dog", "Lily was"] * 2
    all_turns = asyncio.run(add_requests(params, prompts))
    assert params.max_tokens == 16  # each agent had its own copy
    for turns in all_turns:
        assert turns and all(t.finished for t in turns)
        assert len(turns[0].outputs[0].token_ids) == 16 or turns[0].outputs[0].finish_reason == "stop"
    assert llm.engine.reset_prefix_cache() is True
    assert llm.engine.weight_version == llm.refit_engine.weight_version  # falls through to refit.Engine
    assert llm.get_num_unfinished_requests() == 0
    llm.shutdown()
    llm.llm.close()


def test_fields_set_after_construction_are_checked_per_request(stories_llm):
    # verl's update_sampling_params and OpenRLHF's agent loop setattr on SamplingParams.
    params = refit.SamplingParams(temperature=0, max_tokens=8)
    params.max_tokens = 0
    with pytest.raises(ValueError, match="max_tokens"):
        stories_llm.generate({"prompt_token_ids": STORY_PROMPTS[0]}, params, use_tqdm=False)
    params.max_tokens, params.stop = 30, "little"
    out = stories_llm.generate({"prompt_token_ids": STORY_PROMPTS[1]}, params, use_tqdm=False)[0].outputs[0]
    assert out.stop_reason == "little" or out.finish_reason == "length"
    with pytest.raises(ValueError, match="enable_lora"):
        refit.LLM(str(require(STORIES_GGUF)), enable_lora=True)


def test_abort_request_ends_a_generate_call_of_another_thread(llm):
    params = refit.SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "outs", llm.generate([{"prompt_token_ids": PROMPTS[0]}, {"prompt_token_ids": PROMPTS[1]}],
                             [params, refit.SamplingParams(temperature=0, max_tokens=3)], use_tqdm=False)))
    t.start()
    assert wait_until(lambda: llm.scheduler.stats()["generated_tokens"] > 8)
    llm.scheduler.pause("in_place")  # frozen mid-generation: the abort cannot race its end
    with llm._lock:
        ids = [rid for rid, r in llm._live.items() if r.params.max_tokens == 1000]
    assert len(ids) == 1
    llm.abort_request(ids)
    llm.scheduler.resume()
    t.join()
    long, short = box["outs"]
    assert long.outputs[0].finish_reason == "abort" and long.request_id == ids[0]
    assert short.outputs[0].finish_reason == "length" and len(short.outputs[0].token_ids) == 3
    assert llm.get_num_unfinished_requests() == 0


@pytest.mark.parametrize("include,skip", [(False, True), (False, False), (True, True), (True, False)])
def test_a_special_stop_token_text_follows_skip_special_tokens_and_include_stop_str(stories_llm, include, skip):
    # stories260K separates stories with <s> (id 1): stop there, as OpenRLHF's
    # skip_special_tokens=False, include_stop_str_in_output=True keeps it in the text. Most
    # sampled stories end within 500 tokens, not every seed's: the first seed whose does.
    for seed in range(10):
        params = refit.SamplingParams(temperature=1.0, seed=seed, max_tokens=500, stop_token_ids=[1],
                                      skip_special_tokens=skip, include_stop_str_in_output=include)
        out = stories_llm.generate({"prompt_token_ids": [1]}, params, use_tqdm=False)[0].outputs[0]
        if out.finish_reason == "stop":
            break
    assert out.finish_reason == "stop" and out.stop_reason == 1 and out.token_ids[-1] == 1
    assert out.text.endswith("<s>") == (include and not skip)
    assert out.text.count("<s>") <= 1


def test_many_async_requests_with_aborts_and_early_exits_leave_nothing_behind(stories_llm):
    engine = refit.AsyncLLMEngine.from_llm(stories_llm)
    params = refit.SamplingParams(temperature=1.0, seed=9, max_tokens=24, ignore_eos=True)
    want = {i: stories_llm.generate({"prompt_token_ids": STORY_PROMPTS[i % 4]},
                                    refit.SamplingParams(temperature=1.0, seed=9 + i, max_tokens=24, ignore_eos=True),
                                    use_tqdm=False)[0].outputs[0].token_ids for i in range(8)}

    async def one(i):
        p = params.clone()
        p.seed = 9 + i % 8
        last = None
        async for out in engine.generate({"prompt_token_ids": STORY_PROMPTS[i % 8 % 4]}, p, request_id=f"m{i}"):
            last = out
            n = len(out.outputs[0].token_ids)
            if i % 5 == 1 and n >= 2:
                await engine.abort(f"m{i}")
            if i % 5 == 2 and n >= 3:
                return i, None  # leaves early: the request is aborted
        return i, last

    async def main():
        return await asyncio.gather(*(one(i) for i in range(100)))

    for i, out in asyncio.run(main()):
        if i % 5 == 2:
            assert out is None
        elif i % 5 == 1:
            assert out.outputs[0].finish_reason in ("abort", "length")
        else:
            assert out.outputs[0].token_ids == want[i % 8]
    assert engine.get_num_unfinished_requests() == 0
    assert wait_until(lambda: stories_llm.scheduler.stats()["running"] == 0
                      and stories_llm.scheduler.stats()["kv_blocks_used"] == 0)
    engine.shutdown()


def test_verl_rollout_replay():
    """verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py, vLLMRollout: __init__ builds
    LLM(...) with these arguments, sleeps it (free_cache_engine), builds SamplingParams(n=1,
    logprobs=0, max_tokens=response_length, detokenize=False) plus every config key that
    SamplingParams() has; generate_sequences() strips the left padding (_pre_process_inputs),
    sets greedy fields through update_sampling_params (setattr) when do_sample is False, calls
    generate(prompts=[{"prompt_token_ids": ...}], sampling_params=..., lora_request=None,
    use_tqdm=False) and reads outputs[sample_id].token_ids and .logprobs[i][token].logprob.
    verl's sharding manager wakes the engine and loads the trainer's weights through vLLM's
    model runner; refit's equivalent is update_weights_from_tensors."""
    config = {"prompt_length": 8, "response_length": 12, "dtype": "bfloat16", "enforce_eager": True,
              "gpu_memory_utilization": 0.5, "free_cache_engine": True, "load_format": "dummy_dtensor",
              "disable_log_stats": True, "enable_chunked_prefill": True, "max_num_batched_tokens": 8192,
              "temperature": 1.0, "top_k": -1, "top_p": 1.0, "n": 2, "seed": 0}
    max_model_len = config["prompt_length"] + config["response_length"]
    load_format = "dummy" if config["load_format"].startswith("dummy") else config["load_format"]
    with pytest.warns(UserWarning):
        inference_engine = refit.LLM(
            model=str(require(MICRO_GGUF)),
            enable_sleep_mode=config["free_cache_engine"],
            tensor_parallel_size=1,
            distributed_executor_backend="external_launcher",
            dtype=config["dtype"],
            enforce_eager=config["enforce_eager"],
            gpu_memory_utilization=config["gpu_memory_utilization"],
            disable_custom_all_reduce=True,
            disable_mm_preprocessor_cache=True,
            limit_mm_per_prompt=None,
            skip_tokenizer_init=False,
            max_model_len=max_model_len,
            load_format=load_format,
            disable_log_stats=config["disable_log_stats"],
            max_num_batched_tokens=config["max_num_batched_tokens"],
            enable_chunked_prefill=config["enable_chunked_prefill"],
            enable_prefix_caching=True,
            trust_remote_code=False,
            seed=config.get("seed", 0),
        )
    inference_engine.sleep(level=1)
    kwargs = dict(n=1, logprobs=0, max_tokens=config["response_length"], detokenize=False)
    for k in config.keys():
        if hasattr(refit.SamplingParams(), str(k)):
            kwargs[k] = config.get(k)
    sampling_params = refit.SamplingParams(**kwargs)
    assert sampling_params.n == 2 and sampling_params.detokenize is False

    # The sharding manager: wake up, then the trainer's weights.
    inference_engine.wake_up()
    state = {n: t.clone() for n, t in inference_engine.engine.state_dict().items()}
    version = inference_engine.update_weights_from_tensors(state)

    pad = 0
    idx = torch.tensor([[pad] * (8 - len(p)) + p for p in PROMPTS[:3]])

    def _pre_process_inputs(pad_token_id, prompt_token_ids):
        non_pad_index = torch.nonzero(prompt_token_ids != pad_token_id, as_tuple=False)[0][0]
        return prompt_token_ids[non_pad_index:].tolist()

    def generate(do_sample):
        vllm_inputs = [{"prompt_token_ids": _pre_process_inputs(pad, idx[i])} for i in range(idx.size(0))]
        kw = {} if do_sample else {"best_of": 1, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "temperature": 0, "n": 1}
        old = {}
        for key, value in kw.items():  # update_sampling_params
            if hasattr(sampling_params, key):
                old[key] = getattr(sampling_params, key)
                setattr(sampling_params, key, value)
        try:
            outputs = inference_engine.generate(prompts=vllm_inputs, sampling_params=sampling_params,
                                                lora_request=None, use_tqdm=False)
        finally:
            for key, value in old.items():
                setattr(sampling_params, key, value)
        response, rollout_log_probs = [], []
        for output in outputs:
            for sample_id in range(len(output.outputs)):
                response_ids = output.outputs[sample_id].token_ids
                response.append(response_ids)
                rollout_log_probs.append([lp[response_ids[i]].logprob
                                          for i, lp in enumerate(output.outputs[sample_id].logprobs)])
                assert output.outputs[sample_id].text == ""  # detokenize=False
                assert output.outputs[sample_id].weight_versions == [version] * len(response_ids)
        return outputs, response, rollout_log_probs

    outputs, response, logps = generate(do_sample=True)
    assert len(response) == 3 * 2 and all(len(r) <= config["response_length"] for r in response)
    assert all(len(r) == len(lp) for r, lp in zip(response, logps))
    outputs, response, logps = generate(do_sample=False)
    assert len(response) == 3 and sampling_params.n == 2 and sampling_params.temperature == 1.0
    for p, r in zip(PROMPTS[:3], response):
        assert r == inference_engine.engine.generate(p, max_tokens=config["response_length"]).ids
    inference_engine.close()


def test_sleep_level_2_refuses_generation_until_the_weights_are_sent_again():
    llm = refit.LLM(str(require(MICRO_GGUF)), enable_sleep_mode=True)
    p = refit.SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    before = llm.generate({"prompt_token_ids": PROMPTS[0]}, p, use_tqdm=False)[0].outputs[0].token_ids
    state = {n: t.clone() for n, t in llm.engine.state_dict().items()}
    assert llm.sleep(level=2) > 0
    llm.wake_up()
    with pytest.raises(ValueError, match="sleep"):
        llm.generate({"prompt_token_ids": PROMPTS[0]}, p, use_tqdm=False)
    with pytest.raises(ValueError, match="sleep"):
        llm.add_request("r", {"prompt_token_ids": PROMPTS[0]}, p)
    assert llm.get_num_unfinished_requests() == 0
    version = llm.update_weights_from_tensors(state)
    again = llm.generate({"prompt_token_ids": PROMPTS[0]}, p, use_tqdm=False)[0].outputs[0]
    assert again.token_ids == before and again.weight_versions == [version] * 8
    llm.close()


def test_generation_config_eos_list_and_sampling_defaults(tmp_path):
    """Catches: the LLM stopping only on one eos id (config.json's list, generation_config.json's
    ids) and generate() without sampling_params ignoring generation_config.json (vLLM's
    get_default_sampling_params)."""
    import json
    import os
    src = require(STORIES_HF)
    free = refit.LLM(str(src)).generate({"prompt_token_ids": [1, 403, 407]}, refit.SamplingParams(
        temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)[0].outputs[0].token_ids
    target = free[6]
    os.symlink(src / "model.safetensors", tmp_path / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    cfg["eos_token_id"] = [2, 509]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [target], "temperature": 0.0, "max_new_tokens": 12}))
    llm = refit.LLM(str(tmp_path))
    assert sorted(llm.engine.stop_token_ids) == sorted({2, 509, target})
    assert llm.engine.generation_defaults == {"temperature": 0.0, "max_tokens": 12}
    d = llm.get_default_sampling_params()
    assert d.temperature == 0.0 and d.max_tokens == 12
    out = llm.generate({"prompt_token_ids": [1, 403, 407]}, use_tqdm=False)[0].outputs[0]
    at = next(i for i, t in enumerate(free) if t in (2, 509, target))
    assert out.token_ids == free[: at + 1] and out.finish_reason == "stop"
    if free[at] == target:
        assert out.stop_reason == target  # not the primary eos (config's first, 2): vLLM names it
    # generation_config="vllm": no sampling defaults, the file's eos ids still stop.
    plain = refit.LLM(str(tmp_path), generation_config="vllm")
    assert plain.engine.generation_defaults == {} and target in plain.engine.stop_token_ids
