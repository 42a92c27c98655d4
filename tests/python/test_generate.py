"""generate(): ids, text and the weight version used; sampling options; the GIL is
released while the engine works."""
import threading
import time

import pytest
import refit
import torch
from conftest import QWEN2_GGUF, require


def test_generate_text_prompt_with_tokenizer(qwen2):
    out = qwen2.generate("Once upon a time", max_tokens=12, ignore_eos=True)
    assert len(out.ids) == 12 and out.finish_reason == "length"
    assert out.prompt_ids == qwen2.encode("Once upon a time")
    assert out.text == qwen2.decode(out.ids) and isinstance(out.text, str)
    assert out.weight_version == 1
    # dict-style access for code that expects a dict
    assert out["ids"] == out.ids and out.to_dict()["weight_version"] == 1
    # Token ids and text give the same greedy continuation.
    assert qwen2.generate(out.prompt_ids, max_tokens=12, ignore_eos=True).ids == out.ids


def test_greedy_matches_the_llamacpp_oracle(qwen2):
    fields = {}
    for line in require(QWEN2_GGUF.parent / "once_upon_a_time.tokens.txt").read_text().splitlines():
        key, _, value = line.partition(": ")
        fields[key] = value
    prompt = [int(t) for t in fields["prompt_ids"].split()]
    expected = [int(t) for t in fields["generated_ids"].split()]
    assert qwen2.encode("Once upon a time") == prompt
    out = qwen2.generate("Once upon a time", max_tokens=len(expected), ignore_eos=True)
    assert out.ids == expected


def test_seeded_sampling_is_reproducible(stories):
    kwargs = dict(max_tokens=20, temperature=0.9, top_k=40, top_p=0.95, min_p=0.01, repetition_penalty=1.1)
    a = stories.generate([1, 403], seed=7, **kwargs)
    b = stories.generate([1, 403], seed=7, **kwargs)
    c = stories.generate([1, 403], seed=8, **kwargs)
    assert a.ids == b.ids and a.seed == 7
    assert a.ids != c.ids
    assert stories.generate([1, 403], temperature=0.9, max_tokens=4).seed >= 0  # a drawn seed is reported


def test_stop_tokens_and_strings(stories, qwen2):
    free = stories.generate([1, 403], max_tokens=30, ignore_eos=True).ids
    stop_at = free[5]
    out = stories.generate([1, 403], max_tokens=30, stop=[stop_at], ignore_eos=True)
    assert out.ids == free[: free.index(stop_at) + 1] and out.finish_reason == "stop"

    full = qwen2.generate("Once upon a time", max_tokens=16, ignore_eos=True)
    needle = full.text[len(full.text) // 2 :][:3]
    if not needle.strip():
        pytest.skip("no printable text to stop on")
    cut = qwen2.generate("Once upon a time", max_tokens=16, stop=needle, ignore_eos=True)
    assert cut.finish_reason == "stop"
    assert needle not in cut.text and full.text.startswith(cut.text)
    assert len(cut.ids) <= len(full.ids)


def test_generation_releases_the_gil(stories):
    # While one thread is inside generate(), this thread must be able to run Python.
    started, done = threading.Event(), threading.Event()
    result = {}

    def worker():
        started.set()
        result["out"] = stories.generate([1], max_tokens=480, ignore_eos=True)
        done.set()

    t = threading.Thread(target=worker)
    t0 = time.perf_counter()
    t.start()
    started.wait()
    ticks = 0
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
        if ticks > 5:
            break
    t.join()
    elapsed = time.perf_counter() - t0
    assert len(result["out"].ids) == 480
    if elapsed < 0.05:
        pytest.skip(f"generation too fast ({elapsed:.3f} s) to observe")
    assert ticks > 5, "this thread could not run while generate() held the engine"


def test_a_commit_from_another_thread_lands_between_requests(stories):
    # generate() holds one weight version for its whole request; a concurrent commit waits.
    norm = dict(stories.named_parameters())["model.norm.weight"]
    new = torch.from_dlpack(norm).clone() * 1.5
    versions = []

    def generate_many():
        for _ in range(20):
            versions.append(stories.generate([1], max_tokens=40, ignore_eos=True).weight_version)

    t = threading.Thread(target=generate_many)
    t.start()
    stories.update_weights_from_tensors([("model.norm.weight", new)])
    t.join()
    assert set(versions) <= {1, 2} and versions == sorted(versions)
    assert stories.generate([1], max_tokens=1).weight_version == 2


def test_engine_options(stories):
    assert refit.Engine(str(require(QWEN2_GGUF)), threads=1).generate([1, 2], max_tokens=3).ids
    with pytest.raises(ValueError, match="threads"):
        refit.Engine(str(QWEN2_GGUF), threads=0)
    with pytest.raises(ValueError, match="mpirun -np 2"):
        refit.Engine(str(QWEN2_GGUF), tp=2)
    with pytest.raises(refit.Error, match="no-such-model"):
        refit.Engine("/nonexistent/no-such-model.gguf")
    assert stories.config["vocab_size"] == 512 and not stories.has_tokenizer
