"""Structured output on a thinking model (`--reasoning-parser`), as vLLM: the grammar (a choice,
response_format, a structural tag, a forced tool call) applies only after the reasoning's end token, so the model
thinks freely, the reasoning goes to reasoning_content and the constrained answer to content (or
the tool call), streamed and not. A prompt that closed the reasoning (Qwen3's enable_thinking=false
writes <think></think>), or a kimi_k2 request with "thinking" off, is constrained from its first
token; an output that never ends its reasoning is all reasoning, finish_reason "length". A
tokenizer with no single </think> token cannot have both: a 400 names why.

The model is a random tiny DeepSeek V3 with the real Qwen3 tokenizer (</think> is one token) and
its chat template. A random model never writes </think> by chance, so logit_bias makes it: the
`biased` fixture finds a bias that lets greedy decoding write a few tokens of reasoning first and
then </think> (without a grammar); the grammar must leave that reasoning as it is and constrain
what follows."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from e2e_harness import MODEL_NAME, REPO, SERVER_FLAGS, LatentServer, chat_model  # noqa: F401

QWEN3 = REPO.parent / "shared" / "tokenizers" / "qwen3"
MESSAGES = [{"role": "user", "content": "Yes or no?"}]
CHOICE = {"structured_outputs": {"choice": ["yes", "no"]}}


@pytest.fixture(scope="module")
def qwen3_model(tiny_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen3tok")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(QWEN3 / name, out / name)
    return tiny_models.get("deepseek_v3", "--tokenizer", str(out))


@pytest.fixture(scope="module")
def tokenizer(qwen3_model):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(qwen3_model / "tokenizer.json"))


@pytest.fixture(scope="module")
def end_id(tokenizer):
    ids = tokenizer.encode("</think>", add_special_tokens=False).ids
    assert len(ids) == 1
    return ids[0]


def with_tokenizer(model: Path, out: Path, edit) -> Path:
    """`model` (its files linked) with its tokenizer.json changed by `edit` (a function of its
    JSON): the same weights, so the same greedy outputs for the same ids."""
    out.mkdir()
    for f in model.iterdir():
        if f.name != "tokenizer.json":
            (out / f.name).symlink_to(f)
    tok = json.loads((model / "tokenizer.json").read_text())
    edit(tok)
    (out / "tokenizer.json").write_text(json.dumps(tok))
    return out


def serve(model: Path, tmp: Path, *flags: str) -> LatentServer:
    return LatentServer(model, tmp / f"serve{len(list(tmp.glob('*.log')))}.log", *SERVER_FLAGS,
                        *flags)


@pytest.fixture(scope="module")
def r1_server(qwen3_model, tmp_path_factory):
    srv = serve(qwen3_model, tmp_path_factory.mktemp("r1"), "--reasoning-parser", "deepseek_r1")
    yield srv
    assert srv.stop() == 0, srv.log()


def find_bias(client, end_id: int, reasoning: bool = True, **kwargs) -> dict:
    """Arguments (messages, logit_bias) with which greedy decoding of this request without a
    grammar writes some reasoning and then </think> within a few tokens, and that reasoning
    (`thought`). A bias on </think> alone may only win at the first token; other questions give
    other rows. reasoning=False: where the model opens no reasoning, the text before </think> is
    content, and `thought` is that."""
    for question in ("Yes or no?", "Is it so?", "Well?", "Answer me.", "True?"):
        messages = [{"role": "user", "content": question}]
        for tenths in range(30, 200, 5):
            bias = {str(end_id): tenths / 10}
            resp = client.chat.completions.create(
                model=MODEL_NAME, messages=messages, max_completion_tokens=8, temperature=0,
                logit_bias=bias, extra_body={"return_token_ids": True}, **kwargs)
            ids = resp.choices[0].model_extra["token_ids"]
            if end_id in ids and ids[0] != end_id:
                message = resp.choices[0].message
                thought = reasoning_of(message) if reasoning else message.content
                assert thought
                return {"messages": messages, "logit_bias": bias, "thought": thought}
            if ids[0] == end_id:
                break  # a larger bias wins at once too
    pytest.fail("no question and bias on </think> give reasoning and then </think>")


@pytest.fixture(scope="module")
def open_id(tokenizer):
    ids = tokenizer.encode("<think>", add_special_tokens=False).ids
    assert len(ids) == 1
    return ids[0]


@pytest.fixture(scope="module")
def think_server(qwen3_model, tmp_path_factory):
    """auto: "think", since Qwen3's template mentions </think>. By default its prompt ends at
    "assistant\n": the model may open <think> itself (kMayOpen)."""
    srv = serve(qwen3_model, tmp_path_factory.mktemp("think"))
    assert "reasoning parser: think (auto" in srv.log()
    yield srv
    assert srv.stop() == 0, srv.log()


@pytest.fixture(scope="module")
def biased(r1_server, end_id):
    return find_bias(r1_server.client(), end_id)


def reasoning_of(obj):
    return (obj.model_extra or {}).get("reasoning_content")


def chat(client, stream: bool, **kwargs):
    """(reasoning, content, finish_reason, tool_calls) of choice 0; streamed: the deltas joined."""
    args = dict(model=MODEL_NAME, messages=MESSAGES, max_completion_tokens=16, temperature=0)
    args.update(kwargs)
    if not stream:
        resp = client.chat.completions.create(**args)
        choice = resp.choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return reasoning_of(choice.message), choice.message.content, choice.finish_reason, calls
    chunks = list(client.chat.completions.create(stream=True, **args))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join(reasoning_of(d) or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    calls: dict[int, list[str]] = {}
    for d in deltas:
        for call in d.tool_calls or []:
            entry = calls.setdefault(call.index, ["", ""])
            entry[0] += call.function.name or ""
            entry[1] += call.function.arguments or ""
    return reasoning, content, finish[0], [tuple(calls[i]) for i in sorted(calls)]


@pytest.mark.parametrize("stream", [False, True])
def test_choice_after_the_reasoning(r1_server, biased, stream):
    args = dict(biased)
    thought = args.pop("thought")
    reasoning, content, finish, _ = chat(r1_server.client(), stream, extra_body=CHOICE, **args)
    assert (reasoning, finish) == (thought, "stop")
    assert content in ("yes", "no")


def test_each_sample_waits_for_its_own_reasoning(r1_server, biased):
    args = dict(biased)
    thought = args.pop("thought")
    resp = r1_server.client().chat.completions.create(
        model=MODEL_NAME, max_completion_tokens=16, temperature=1e-3, seed=0, n=2,
        extra_body=CHOICE, **args)  # n > 1 needs a temperature (vLLM's rule); this one is ~greedy
    assert len(resp.choices) == 2
    for choice in resp.choices:
        assert reasoning_of(choice.message) == thought and choice.message.content in ("yes", "no")
        assert choice.finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_after_the_reasoning(r1_server, biased, stream):
    args = dict(biased)
    thought = args.pop("thought")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema, "strict": True}}
    reasoning, content, finish, _ = chat(r1_server.client(), stream, response_format=fmt,
                                         max_completion_tokens=32, **args)
    assert (reasoning, finish) == (thought, "stop")
    assert isinstance(json.loads(content)["ok"], bool)


@pytest.mark.parametrize("stream", [False, True])
def test_structural_tag_after_the_reasoning(r1_server, biased, stream):
    args = dict(biased)
    thought = args.pop("thought")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    tag = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<f"], "at_least_one": True, "stop_after_first": True,
        "tags": [{"begin": "<f>", "end": "</f>", "content": {
            "type": "json_schema", "json_schema": schema, "max_whitespace_cnt": 1}}]}}
    reasoning, content, finish, _ = chat(r1_server.client(), stream, response_format=tag,
                                         max_completion_tokens=40, **args)
    assert (reasoning, finish) == (thought, "stop")
    tagged = re.fullmatch(r"<f>(.*)</f>", content, re.S)
    assert tagged and isinstance(json.loads(tagged.group(1))["ok"], bool), content


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_call_after_the_reasoning(r1_server, end_id, stream):
    tools = [{"type": "function", "function": {
        "name": "answer", "parameters": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                                         "required": ["ok"]}}}]
    # The template renders the tools into the prompt: the same prompt under tool_choice "auto".
    args = find_bias(r1_server.client(), end_id, tools=tools, tool_choice="auto")
    thought = args.pop("thought")
    reasoning, content, _, calls = chat(
        r1_server.client(), stream, tools=tools, max_completion_tokens=32, **args,
        tool_choice={"type": "function", "function": {"name": "answer"}})
    assert reasoning == thought and not content
    assert len(calls) == 1 and calls[0][0] == "answer"
    assert isinstance(json.loads(calls[0][1])["ok"], bool)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice",
                         ["required", {"type": "function", "function": {"name": "answer"}}])
def test_forced_call_in_a_reasoning_that_never_ends_is_no_call(r1_server, choice, stream):
    # No bias: the model never writes </think>, so it never makes the forced call. No call is
    # made up: the output is reasoning, and it finishes as cut (length, or stop at a stop
    # string inside the reasoning), not "tool_calls".
    tools = [{"type": "function", "function": {"name": "answer", "parameters": {"type": "object"}}}]
    args = dict(tools=tools, tool_choice=choice, max_completion_tokens=6)
    reasoning, content, finish, calls = chat(r1_server.client(), stream, **args)
    assert (finish, calls) == ("length", []) and not content and reasoning
    thought = reasoning
    reasoning, content, finish, calls = chat(r1_server.client(), stream, stop=[thought[2:]],
                                             **args)
    assert (reasoning, finish, calls) == (thought[:2], "stop", []) and not content


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_that_never_ends_is_unconstrained(r1_server, stream):
    # No bias: the random model never writes </think>, so nothing is constrained and all of the
    # output is reasoning, cut by max_tokens.
    reasoning, content, finish, _ = chat(r1_server.client(), stream, max_completion_tokens=6,
                                         extra_body=CHOICE)
    assert finish == "length" and not content
    assert reasoning and reasoning not in ("yes", "no")


def test_prompt_that_closed_the_reasoning_is_constrained_at_once(qwen3_model, tmp_path):
    # Qwen3's template mentions </think>, so auto picks "think"; enable_thinking=false ends the
    # prompt with <think></think>: the answer starts at once, under the grammar.
    srv = serve(qwen3_model, tmp_path)
    try:
        assert "reasoning parser: think (auto" in srv.log()
        body = dict(CHOICE, chat_template_kwargs={"enable_thinking": False})
        for stream in (False, True):
            reasoning, content, finish, _ = chat(srv.client(), stream, extra_body=body)
            assert not reasoning and content in ("yes", "no") and finish == "stop"
    finally:
        assert srv.stop() == 0, srv.log()


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_that_opens_no_reasoning_is_constrained_at_once(think_server, open_id, stream):
    # The prompt leaves the model to open <think>. The grammar allows <think> as the first token
    # beside its own, which this random model may prefer: banned here, so that the first token
    # is not <think>. The parser then files the output as content, and the grammar must mask it
    # from that first token.
    reasoning, content, finish, _ = chat(think_server.client(), stream, extra_body=CHOICE,
                                         logit_bias={str(open_id): -100})
    assert not reasoning and content in ("yes", "no") and finish == "stop"


def test_text_before_a_late_end_marker_is_the_constrained_answer(think_server, open_id, end_id):
    # Unconstrained, this model writes some text and then </think>: the parser, which saw no
    # <think> first, has filed that text as content. So the grammar must mask from the first
    # token (not from after </think>): the forced call's arguments are the grammar's JSON alone.
    # (<think> is banned as above; the unconstrained output has none.)
    tools = [{"type": "function", "function": {
        "name": "answer", "parameters": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                                         "required": ["ok"]}}}]
    args = find_bias(think_server.client(), end_id, reasoning=False, tools=tools,
                     tool_choice="auto")
    args.pop("thought")
    args["logit_bias"][str(open_id)] = -100
    for stream in (False, True):
        reasoning, content, _, calls = chat(
            think_server.client(), stream, tools=tools, max_completion_tokens=32, **args,
            tool_choice={"type": "function", "function": {"name": "answer"}})
        assert not reasoning and not content, stream
        assert len(calls) == 1 and calls[0][0] == "answer", stream
        assert isinstance(json.loads(calls[0][1])["ok"], bool), calls


@pytest.mark.parametrize("stream", [False, True])
def test_a_first_think_token_opens_reasoning_and_the_grammar_waits(think_server, open_id,
                                                                   stream):
    # A first <think> token opens the reasoning, as the parser reads it: the grammar then waits
    # for </think>, which this model never writes, so the output is all reasoning.
    reasoning, content, finish, _ = chat(think_server.client(), stream, max_completion_tokens=6,
                                         logit_bias={str(open_id): 100}, extra_body=CHOICE)
    assert finish == "length" and not content and reasoning


@pytest.mark.parametrize("stream", [False, True])
def test_closed_prompt_is_constrained_at_once_under_deepseek_r1(r1_server, stream):
    # deepseek_r1 starts in the reasoning, but not where the prompt closed it (Qwen3 with
    # enable_thinking=false): the grammar applies from the first token, as vLLM's
    # is_reasoning_end on the prompt's ids, and the answer is content.
    body = dict(CHOICE, chat_template_kwargs={"enable_thinking": False})
    reasoning, content, finish, _ = chat(r1_server.client(), stream, extra_body=body)
    assert not reasoning and content in ("yes", "no") and finish == "stop"


def test_replayed_reasoning_then_forced_call_is_split(qwen3_model, tokenizer, tmp_path):
    # --debug-replay (no sampling, no grammar): the parsers alone. The reasoning goes to
    # reasoning_content and the JSON after </think> is the forced call's arguments (in
    # json.dumps's spacing, as every parser writes them).
    text = "<think>Let me see.</think>" + '{"ok":true}'
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"ids": tokenizer.encode(text, add_special_tokens=False).ids}))
    srv = serve(qwen3_model, tmp_path, "--reasoning-parser", "deepseek_r1", "--debug-replay",
                str(replay))
    tools = [{"type": "function", "function": {"name": "answer", "parameters": {"type": "object"}}}]
    try:
        for stream in (False, True):
            reasoning, content, _, calls = chat(
                srv.client(), stream, tools=tools, max_completion_tokens=32,
                tool_choice={"type": "function", "function": {"name": "answer"}})
            assert (reasoning, calls) == ("Let me see.", [("answer", '{"ok": true}')]), stream
            assert not content
    finally:
        assert srv.stop() == 0, srv.log()


def test_special_markers_still_split_reasoning_from_the_answer(qwen3_model, biased, tmp_path):
    # A tokenizer that marks <think> and </think> special: skip_special_tokens (the default)
    # must not drop them before the reasoning parser, which would file the constrained answer
    # after </think> as reasoning while the grammar switched on the token's id.
    def special(tok):
        for t in tok["added_tokens"]:
            if t["content"] in ("<think>", "</think>"):
                t["special"] = True

    srv = serve(with_tokenizer(qwen3_model, tmp_path / "model", special), tmp_path,
                "--reasoning-parser", "deepseek_r1")
    args = dict(biased)
    thought = args.pop("thought")
    try:
        for stream in (False, True):
            reasoning, content, finish, _ = chat(srv.client(), stream, extra_body=CHOICE, **args)
            assert (reasoning, finish) == (thought, "stop"), stream
            assert content in ("yes", "no"), stream
        assert "reasoning markers the tokenizer marks special (kept" in srv.log()
    finally:
        assert srv.stop() == 0, srv.log()


def test_split_start_marker_refuses_a_grammar_where_the_model_may_open(qwen3_model, tmp_path):
    # Without a <think> token the grammar cannot tell whether the first token opens the reasoning
    # (kMayOpen), so that is a 400 naming the marker; a prompt that opened or closed the
    # reasoning itself needs only </think>.
    import openai

    def split_open(tok):
        tok["added_tokens"] = [t for t in tok["added_tokens"] if t["content"] != "<think>"]

    srv = serve(with_tokenizer(qwen3_model, tmp_path / "model", split_open), tmp_path)
    try:
        with pytest.raises(openai.BadRequestError) as err:
            chat(srv.client(), False, extra_body=CHOICE)
        assert "single token for its marker <think>" in str(err.value)
        body = dict(CHOICE, chat_template_kwargs={"enable_thinking": False})
        assert chat(srv.client(), False, extra_body=body)[1] in ("yes", "no")
    finally:
        assert srv.stop() == 0, srv.log()


def test_split_end_marker_refuses_a_grammar(chat_model, tmp_path):
    # The deepseek_v3 tokenizer has no </think> token: the grammar could not tell where the answer
    # starts, so the combination is a 400 (and a request without a grammar still runs).
    import openai

    srv = serve(chat_model, tmp_path, "--reasoning-parser", "deepseek_r1")
    try:
        with pytest.raises(openai.BadRequestError) as err:
            chat(srv.client(), False, extra_body=CHOICE)
        assert "</think>" in str(err.value) and "one token" in str(err.value).replace(
            "single token", "one token")
        assert chat(srv.client(), False, max_completion_tokens=4)[2] == "length"
    finally:
        assert srv.stop() == 0, srv.log()


@pytest.fixture(scope="module")
def kimi_server(qwen3_model, tmp_path_factory):
    """vLLM's kimi_k2 parser on Qwen3's template: the prompt ends at "assistant\n", so by default
    the output starts inside the reasoning (this model never writes </think>: all reasoning)."""
    srv = serve(qwen3_model, tmp_path_factory.mktemp("kimi"), "--reasoning-parser", "kimi_k2")
    yield srv
    assert srv.stop() == 0, srv.log()


@pytest.mark.parametrize("stream", [False, True])
def test_kimi_thinking_off_is_plain_content(kimi_server, stream):
    # vLLM's kimi_k2 reads chat_template_kwargs' "thinking" (Python truth: null and 0 are off
    # too) and then parses nothing: all of the output is content. "enable_thinking" is not its
    # switch (Qwen3's template closes no reasoning for it here, as it renders no block).
    client = kimi_server.client()
    reasoning, content, finish, _ = chat(client, stream, max_completion_tokens=6)
    assert reasoning and not content and finish == "length"
    for off in (False, None, 0):
        body = {"chat_template_kwargs": {"thinking": off}}
        got = chat(client, stream, max_completion_tokens=6, extra_body=body)
        assert not got[0] and got[1] == reasoning and got[2] == "length", (off, got)
    body = {"chat_template_kwargs": {"thinking": True}}
    on = chat(client, stream, max_completion_tokens=6, extra_body=body)
    assert on[0] == reasoning and not on[1], on


@pytest.mark.parametrize("stream", [False, True])
def test_kimi_thinking_off_is_constrained_at_once(kimi_server, stream):
    # With thinking on, the grammar waits for a </think> this model never writes: all reasoning.
    reasoning, content, finish, _ = chat(kimi_server.client(), stream, max_completion_tokens=6,
                                         extra_body=CHOICE)
    assert reasoning and not content and finish == "length"
    # Off, there is no reasoning to wait for: the grammar applies from the first token.
    body = dict(CHOICE, chat_template_kwargs={"thinking": False})
    reasoning, content, finish, _ = chat(kimi_server.client(), stream, extra_body=body)
    assert not reasoning and content in ("yes", "no") and finish == "stop"
