#!/usr/bin/python3
"""A harmony model (gpt-oss's chat format) served end to end (CTest runs this file; argv[1] is refit).

A tiny random-weight Llama with tests/data/harmony's vocabulary (byte-level, the o200k
pre-tokenizer, the harmony special tokens), a harmony-style chat template and a
generation_config.json whose eos ids are <|return|>, <|endoftext|> and <|call|> (gpt-oss's).
  * the request's reasoning_effort, chat_template_kwargs (model_identity, builtin_tools), a
    developer message, tools and an earlier turn's "reasoning" reach the template: the prompt
    ids equal the encoding of Jinja2's render with those variables;
  * sampled answers (the structural tokens' head rows are scaled up so that random weights
    write them often) come back parsed:
    the message's content, reasoning and tool calls are what an independent reading of the
    returned token_ids gives, no structural token's text reaches them, and the streamed deltas
    of the same seed add up to the same answer;
  * the completions route and --reasoning-parser none give the raw text.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import jinja2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refit_server import RefitServer  # noqa: E402

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "harmony")
TINY_CKPT = os.path.join(ROOT, "..", "shared", "realhf", "tools", "tiny_ckpt.py")
LLAMA_CONFIG = os.path.join(ROOT, "..", "shared", "realhf", "configs", "llama3.2-1b-rope-llama3", "config.json")
SPECIALS = json.load(open(os.path.join(DATA, "refs.json")))["specials"]
MARKERS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def build(out):
    os.makedirs(out)
    subprocess.run(["/usr/bin/python3", TINY_CKPT, "make", LLAMA_CONFIG, out, "--seed", "3",
                    "--tokenizer-dir", DATA, "--set", json.dumps({"bos_token_id": None, "eos_token_id": SPECIALS["<|return|>"],
                                                                  "tie_word_embeddings": False})],
                   check=True, capture_output=True)
    # The structural tokens' head rows scaled up, so sampled answers are full of messages.
    sys.path.insert(0, os.path.dirname(TINY_CKPT))
    import tiny_ckpt  # noqa: E402
    head = tiny_ckpt.make_weights(json.load(open(os.path.join(out, "config.json"))), 3)["lm_head.weight"]
    craft = [{"tensor": "lm_head.weight", "row": SPECIALS[m], "values": (head[SPECIALS[m]] * 12).tolist()}
             for m in ("<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>")]
    vocab = json.load(open(os.path.join(DATA, "tokenizer.json")))["model"]["vocab"]
    craft += [{"tensor": "lm_head.weight", "row": vocab[w], "values": (head[vocab[w]] * 8).tolist()}
              for w in ("analysis", "final")]
    json.dump(craft, open(os.path.join(out, "..", "craft.json"), "w"))
    subprocess.run(["/usr/bin/python3", TINY_CKPT, "weights", out, "--seed", "3", "--craft",
                    os.path.join(out, "..", "craft.json")], check=True, capture_output=True)
    shutil.copy(os.path.join(DATA, "tokenizer.json"), out)
    shutil.copy(os.path.join(DATA, "chat_template.jinja"), out)
    json.dump({"eos_token_id": [SPECIALS["<|return|>"], SPECIALS["<|endoftext|>"], SPECIALS["<|call|>"]]},
              open(os.path.join(out, "generation_config.json"), "w"))


def reference_parse(ids, decode):
    """An independent reading of harmony output: (content, reasoning, [(name, arguments)])."""
    by_id = {v: k for k, v in SPECIALS.items()}
    msgs, header, body, state, cur = [], "", [], "header", None
    for i in ids + [None]:
        mark = by_id.get(i) if i is not None else "<|eof|>"
        if mark is None or mark not in MARKERS + ["<|eof|>"]:
            if mark is None and i is not None and i in by_id:
                continue  # another special: no text
            if state == "header":
                header += decode([i])
            elif state == "body":
                body.append(i)
            else:  # text outside a message is content
                state, cur, body = "body", ("content", None), [i]
            continue
        if state == "body" and mark in ("<|channel|>", "<|constrain|>", "<|message|>"):
            continue  # stray inside a body: the message goes on
        if state == "body" and cur is not None:
            msgs.append((cur, decode(body)))
        if mark == "<|channel|>" and state == "header":
            header += " <|channel|> "
            continue
        if mark == "<|constrain|>" and state == "header":
            header += " <|constrain|> "
            continue
        if mark == "<|message|>" and state == "header":
            words = header.split()
            rcpt = next((w[3:] for w in words if w.startswith("to=")), "")
            chan = next((words[k + 1] for k, w in enumerate(words[:-1]) if w == "<|channel|>"), "")
            if rcpt.startswith("functions.") and chan in ("", "commentary", "analysis"):
                cur = ("tool", rcpt[len("functions."):])
            elif chan == "analysis":
                cur = ("reasoning", None)
            elif rcpt and rcpt != "assistant":
                cur = ("none", None)
            else:
                cur = ("content", None)
            state, body, header = "body", [], ""
            continue
        if mark == "<|start|>":
            state, header, cur = "header", "", None
        elif mark in ("<|end|>", "<|return|>", "<|call|>"):
            state, header, cur = "between", "", None
        body = []
    content = "\n".join(t for (k, _), t in msgs if k == "content" and t) or None
    reasoning = "\n".join(t for (k, _), t in msgs if k == "reasoning" and t) or None
    tools = [(n, t) for (k, n), t in msgs if k == "tool"]
    return content, reasoning, tools


def main():
    tmp = tempfile.mkdtemp(prefix="refit_harmony_")
    try:
        model = os.path.join(tmp, "harmony-tiny")
        build(model)
        s = RefitServer(REFIT, model)
        try:
            run_checks(s, model)
        finally:
            s.stop()
        s = RefitServer(REFIT, model, "--reasoning-parser", "none")
        try:
            st, body = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                       "max_tokens": 8, "temperature": 0})
            check(st == 200 and "reasoning" not in body["choices"][0]["message"], f"--reasoning-parser none: {body}")
            st, models = s.get("/v1/models")
            check(models["data"][0]["reasoning_parser"] == "none", f"models: {models}")
        finally:
            s.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("harmony serve: all checks passed")


def run_checks(s, model):
    st, models = s.get("/v1/models")
    check(models["data"][0]["reasoning_parser"] == "gpt-oss", f"auto picks harmony: {models}")
    stops = models["data"][0]["stop_token_ids"]
    check(SPECIALS["<|return|>"] in stops and SPECIALS["<|call|>"] in stops and SPECIALS["<|end|>"] not in stops,
          f"stop on <|return|> and <|call|>, not <|end|>: {stops}")

    def encode(text):
        st, r = s.post("/tokenize", {"prompt": text, "add_special_tokens": False})
        return r["tokens"]

    def decode(ids):
        st, r = s.post("/detokenize", {"tokens": ids})
        return r["prompt"]

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    messages = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello", "reasoning": "They greet."},
                {"role": "user", "content": "Weather in Paris?"}]
    req = {"messages": messages, "tools": tools, "reasoning_effort": "low", "max_tokens": 1,
           "temperature": 0, "return_token_ids": True,
           "chat_template_kwargs": {"model_identity": "You are Tiny.", "builtin_tools": ["browser"]}}
    st, body = s.post("/v1/chat/completions", req)
    check(st == 200, f"chat with kwargs: {st} {body}")
    tmpl = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(
        open(os.path.join(DATA, "chat_template.jinja")).read())
    want_msgs = [dict(m, thinking=m["reasoning"]) if "reasoning" in m else m for m in messages]
    text = tmpl.render(messages=want_msgs, tools=tools, add_generation_prompt=True, reasoning_effort="low",
                       model_identity="You are Tiny.", builtin_tools=["browser"])
    check("Reasoning: low" in text and "analysis<|message|>They greet." in text, f"reference render: {text!r}")
    check(body.get("prompt_token_ids") == encode(text), f"prompt ids differ from the render {text!r}")

    # Sampled answers, parsed; the same seed streamed adds up to the same answer.
    seen = {"reasoning": 0, "content": 0, "tool": 0}
    multi = 0
    for seed in range(24):
        req = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 48, "temperature": 1.5,
               "seed": seed, "tools": tools}
        st, body = s.post("/v1/chat/completions", req)
        ch = body["choices"][0]
        msg = ch["message"]
        content, reasoning, calls = reference_parse(ch["token_ids"], decode)
        check(msg["content"] == content, f"seed {seed} content {msg['content']!r} != {content!r}")
        check(msg["reasoning"] == reasoning and msg["reasoning_content"] == reasoning,
              f"seed {seed} reasoning {msg['reasoning']!r} != {reasoning!r}")
        got_calls = [(c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]]
        check(got_calls == calls, f"seed {seed} tool calls {got_calls} != {calls}")
        check((ch["finish_reason"] == "tool_calls") == bool(calls) or ch["finish_reason"] not in ("stop", "length", "tool_calls"),
              f"seed {seed} finish_reason {ch['finish_reason']} with calls {calls}")
        for field in (msg["content"] or "", msg["reasoning"] or "") + tuple(a for _, a in got_calls):
            for m in MARKERS:
                check(m not in field, f"seed {seed}: {m} leaked into {field!r}")
        seen["reasoning"] += reasoning is not None
        seen["content"] += content is not None
        seen["tool"] += bool(calls)
        multi += SPECIALS["<|end|>"] in ch["token_ids"][:-1]

        events = s.stream("/v1/chat/completions", dict(req, stream=True))
        chunks = [json.loads(e) for e in events if e != "[DONE]"]
        s_content, s_reasoning, s_args, s_names, finish = "", "", {}, {}, None
        for c in chunks:
            for choice in c["choices"]:
                d = choice["delta"]
                s_content += d.get("content") or ""
                s_reasoning += d.get("reasoning") or ""
                check(d.get("reasoning") == d.get("reasoning_content"), f"seed {seed} delta names differ: {d}")
                for t in d.get("tool_calls", []):
                    if "id" in t:
                        s_names[t["index"]] = t["function"]["name"]
                    s_args[t["index"]] = s_args.get(t["index"], "") + t["function"]["arguments"]
                finish = choice.get("finish_reason") or finish
        check(s_content == (msg["content"] or "") and s_reasoning == (msg["reasoning"] or ""),
              f"seed {seed}: stream {s_content!r}/{s_reasoning!r} != whole {msg['content']!r}/{msg['reasoning']!r}")
        check([(s_names[k], s_args[k]) for k in sorted(s_names)] == got_calls, f"seed {seed}: streamed calls differ")
        check(finish == ch["finish_reason"], f"seed {seed}: stream finish {finish} != {ch['finish_reason']}")
    print("parsed answers with reasoning / content / tool calls:", seen)
    check(seen["reasoning"] + seen["content"] > 0, "no sampled answer exercised the parser")
    check(multi > 0, "no sampled answer went past an <|end|>")

    # The completions route stays raw text, as vLLM's does.
    st, body = s.post("/v1/completions", {"prompt": "<|start|>assistant", "max_tokens": 8, "temperature": 0})
    check(st == 200 and "text" in body["choices"][0] and "message" not in body["choices"][0], f"completions: {body}")


if __name__ == "__main__":
    main()
