"""refit.LLM.chat (vLLM's offline chat): a real model's template (../shared/realhf) rendered in
Jinja2 as transformers renders it, on the host interpreter of this Python process.

What these pin down: every realhf chat case of Qwen2.5-Instruct (default system prompt, tools,
tool round trip) becomes exactly Hugging Face's prompt ids, and the tiny reference checkpoint
behind the refs' serve_next answers with the reference's greedy token and logprob (a prompt
off by one token moves the logprob by ~1e-3); a batch of conversations equals each alone;
chat_template overrides the model's; a template that raises is a ValueError with its message.
"""
import json
import shutil
import subprocess

import pytest

import refit
from conftest import SHARED, require

REALHF = SHARED / "realhf"
QWEN = REALHF / "models" / "qwen2.5-instruct"


@pytest.fixture(scope="module")
def qwen_chat(tmp_path_factory):
    ref = json.loads(require(REALHF / "refs" / "qwen2.5-instruct.json").read_text())
    out = tmp_path_factory.mktemp("qwen-chat")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(QWEN / f, out / f)
    (out / "config.json").write_text(json.dumps(ref["serve_config"]))
    made = subprocess.run(["/usr/bin/python3", str(REALHF / "tools" / "tiny_ckpt.py"), "weights", str(out), "--seed",
                           "0"], capture_output=True, text=True, check=True)
    assert ref["serve_checkpoint_sha256"] in made.stdout
    llm = refit.LLM(str(out), seed=0)
    yield llm, ref
    llm.close()


def cases():
    return {c["id"]: c for c in json.loads((REALHF / "cases.json").read_text())["chat"]}


def test_every_case_gives_hugging_faces_prompt_and_the_reference_next_token(qwen_chat):
    llm, ref = qwen_chat
    params = refit.SamplingParams(max_tokens=1, temperature=0, logprobs=0)
    for row in ref["chat"]:
        case = cases()[row["case"]]
        out = llm.chat(case["messages"], params, use_tqdm=False, tools=case.get("tools"),
                       chat_template_kwargs=case.get("chat_template_kwargs"))[0]
        assert out.prompt_token_ids == row["prompt_ids"], row["case"]
        sample = out.outputs[0]
        assert sample.token_ids[0] == row["serve_next"]["token"], row["case"]
        got = sample.logprobs[0][sample.token_ids[0]].logprob
        assert abs(got - row["serve_next"]["logprob"]) < 1e-4, row["case"]


def test_a_batch_of_conversations_equals_each_alone(qwen_chat):
    llm, ref = qwen_chat
    params = refit.SamplingParams(max_tokens=3, temperature=0)
    convs = [c["messages"] for c in cases().values() if "tools" not in c]
    together = llm.chat(convs, params, use_tqdm=False)
    alone = [llm.chat(c, params, use_tqdm=False)[0] for c in convs]
    assert [o.prompt_token_ids for o in together] == [o.prompt_token_ids for o in alone]
    assert [o.outputs[0].token_ids for o in together] == [o.outputs[0].token_ids for o in alone]


def test_chat_template_override_and_template_errors(qwen_chat):
    llm, _ = qwen_chat
    msgs = [{"role": "user", "content": "Hi"}]
    plain = llm.chat(msgs, refit.SamplingParams(max_tokens=1), use_tqdm=False,
                     chat_template="{{ messages[0]['content'] }}")[0]
    assert plain.prompt_token_ids == llm.get_tokenizer().encode("Hi", add_special_tokens=False)
    with pytest.raises(ValueError, match="only users"):
        llm.chat(msgs, use_tqdm=False, chat_template="{{ raise_exception('only users here') }}")
    with pytest.raises(ValueError, match="cannot both be true"):
        llm.chat(msgs, use_tqdm=False, continue_final_message=True)
