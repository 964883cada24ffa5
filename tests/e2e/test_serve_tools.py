"""Tool calling over the OpenAI API (`--tool-call-parser`), driven by the official `openai` client,
with the test-only `--debug-replay FILE` making a random tiny model write each family's tool-call
markup (tokenized by the real DeepSeek V3 tokenizer: DeepSeek's markers are single tokens, Kimi's
and GLM's are split over several). Per family and chat template:
- the request's `tools` reach the model; the markup comes back as `tool_calls` (ids, names, JSON
  arguments), finish_reason "tool_calls", streamed and not: the same calls, the streamed ones as
  `delta.tool_calls` (id and name first, then argument pieces), no markup in `content`;
- sending the calls and the tools' results back renders the next prompt exactly as transformers'
  apply_chat_template does (compared token for token through return_token_ids), with the
  arguments as the template reads them (JSON text for DeepSeek and Kimi, an object for GLM-4.5)
  and the null content beside the calls as the template reads it (none for DeepSeek V3, whose
  template writes the calls only then; "" for the others).
Also: tool_choice "none" and requests without tools leave the markup in content, auto-selection
of the parser from the template, and bad tools / tool_choice / tool-call messages are 400s naming
the field. DeepSeek V3.2 ships no chat template (its DSML format is checked on the output side)."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
from openai import NOT_GIVEN

from e2e_harness import MODEL_NAME, REPO, SERVER_FLAGS, LatentServer, chat_model  # noqa: F401

TEMPLATES = REPO.parent / "shared" / "chat-templates"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}},
]
MESSAGES = [{"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "Weather in Paris for 3 days, and search 東京 weather."}]
CALLS = [("get_weather", {"city": "Paris", "days": 3}), ("search", {"query": "東京 weather"})]
RESULTS = ['{"temp": 18, "sky": "cloudy"}', "1. https://example.com/tokyo"]

# family -> (chat template file or None for the model's own, parser flag, pieces the model
# writes, expected content, expected reasoning, the template reads arguments as objects).
FAMILIES = {
    "deepseek_v3": (None, "auto", [
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n",
        '{"city": "Paris", ', '"days": 3}', "\n```<｜tool▁call▁end｜>\n",
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n",
        '{"query": "東京 weather"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'], None, None, False),
    "deepseek_v31": ("deepseek-v3.1.jinja", "auto", [
        "Let me check.", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>",
        '{"city": "Paris", ', '"days": 3}', "<｜tool▁call▁end｜><｜tool▁call▁begin｜>search",
        '<｜tool▁sep｜>{"query": "東京 weather"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'],
        "Let me check.", None, False),
    "kimi_k2": ("kimi-k2.jinja", "auto", [
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0",
        '<|tool_call_argument_begin|>{"city": "Paris", ', '"days": 3}<|tool_call_end|>',
        "<|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>",
        '{"query": "東京 weather"}<|tool_call_end|><|tool_calls_section_end|>'], None, None, False),
    "glm45": ("glm-4.5.jinja", "auto", [
        "\n<think>Need the weather first.</think>\nLet me check.\n<tool_call>get_weather\n",
        "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n",
        "<arg_value>3</arg_value>\n</tool_call>\n<tool_call>search\n<arg_key>query</arg_key>\n",
        "<arg_value>東京 weather</arg_value>\n</tool_call>"],
        "\nLet me check.", "Need the weather first.", True),
    # No V3.2 chat template exists (it ships Python encoding code); its DSML output is parsed
    # under the V3.1 template.
    "deepseek_v32": ("deepseek-v3.1.jinja", "deepseek_v32", [
        "Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n",
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n",
        "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n",
        "<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter name=\"query\" string=\"true\">",
        "東京 weather</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"],
        "Checking.", None, False),
}


@pytest.fixture(scope="module")
def tokenizer(chat_model):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(chat_model / "tokenizer.json"))


def none_kept_rendering(hf, conversation: list[dict], tools, add_generation_prompt=True) -> str:
    """The conversation rendered by hf's chat template in transformers' own jinja2 environment, but
    with null values kept as none (apply_chat_template drops them), as jinja2 renders an OpenAI
    message: what DeepSeek V3's template was written for."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template(hf.chat_template).render(
        messages=conversation, tools=tools, add_generation_prompt=add_generation_prompt,
        **hf.special_tokens_map)


def model_with_template(chat_model: Path, template: str | None, out: Path) -> Path:
    out.mkdir()
    for item in chat_model.iterdir():
        (out / item.name).symlink_to(item)
    if template:
        (out / "chat_template.jinja").write_text((TEMPLATES / template).read_text())
    return out


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, chat_model, tokenizer, tmp_path_factory):
    """(name, server, model dir) for one family, serving its markup."""
    name = request.param
    template, parser, pieces, *_ = FAMILIES[name]
    tmp = tmp_path_factory.mktemp(name)
    model = model_with_template(chat_model, template, tmp / "model")
    ids = []
    for piece in pieces:
        ids += tokenizer.encode(piece, add_special_tokens=False).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == "".join(pieces)
    (tmp / "replay.json").write_text(json.dumps(ids))
    srv = LatentServer(model, tmp / "serve.log", *SERVER_FLAGS, "--debug-replay",
                       str(tmp / "replay.json"), "--tool-call-parser", parser)
    yield name, srv, model
    assert srv.stop() == 0, srv.log()


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


def create(srv, stream: bool, **kwargs):
    args = dict(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS, max_completion_tokens=400,
                temperature=0)
    args.update(kwargs)
    return srv.client().chat.completions.create(stream=stream, **args)


def streamed(srv, **kwargs):
    """(content, reasoning, calls [(id, name, arguments)], finish_reason, tool-call deltas)."""
    chunks = list(create(srv, True, **kwargs))
    content, reasoning, calls, deltas, finish = "", "", [], [], []
    for chunk in chunks:
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        reasoning += extra(choice.delta, "reasoning_content") or ""
        for d in choice.delta.tool_calls or []:
            deltas.append(d)
            if d.index == len(calls):
                # A call's first delta: its id, type and name.
                assert d.id and d.type == "function" and d.function.name, d
                calls.append([d.id, d.function.name, d.function.arguments or ""])
            else:
                assert d.index == len(calls) - 1 and d.id is None and d.function.name is None, d
                calls[d.index][2] += d.function.arguments
        if choice.finish_reason:
            finish.append(choice.finish_reason)
    assert len(finish) == 1
    return content, reasoning, [tuple(c) for c in calls], finish[0], deltas


def check_calls(calls, name):
    assert [(n, json.loads(a)) for _, n, a in calls] == CALLS
    ids = [i for i, _, _ in calls]
    assert len(set(ids)) == len(ids)
    if name == "kimi_k2":
        assert ids == ["functions.get_weather:0", "functions.search:1"]
    else:
        assert all(i.startswith("call_") for i in ids)


# family -> its non-streamed answer, which the round trip sends back (each answer costs seconds on
# a busy machine: a random tiny model with a 129k vocabulary).
ANSWERS = {}


def answer(name, srv):
    if name not in ANSWERS:
        ANSWERS[name] = create(srv, False)
    return ANSWERS[name]


def test_tool_calls_streamed_and_not(family):
    name, srv, _ = family
    _, _, _, content, reasoning, _ = FAMILIES[name]
    before = srv.metrics()
    resp = answer(name, srv)
    message = resp.choices[0].message
    assert resp.choices[0].finish_reason == "tool_calls"
    assert message.content == content
    assert extra(message, "reasoning_content") == reasoning
    calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls]
    assert all(c.type == "function" for c in message.tool_calls)
    check_calls(calls, name)

    s_content, s_reasoning, s_calls, finish, deltas = streamed(srv)
    assert finish == "tool_calls"
    assert s_content == (content or "") and s_reasoning == (reasoning or "")
    # The same calls (ids differ between requests, except Kimi's own).
    assert [c[1:] for c in s_calls] == [c[1:] for c in calls]
    check_calls(s_calls, name)
    # Arguments arrive in pieces, not only whole at the end.
    assert len(deltas) > len(calls)
    assert all("<" not in (d.function.arguments or "") for d in deltas)
    # /metrics counts both choices under their finish reason (the first answer may have come
    # from an earlier test: at least the streamed one here).
    key = 'latent_request_success_total{finished_reason="tool_calls"}'
    assert srv.metrics().get(key, 0) - before.get(key, 0) >= 1


# Every family with a chat template (no DeepSeek V3.2 template exists to render with: its parser is
# tested on output only).
@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "deepseek_v32"], indirect=True)
def test_round_trip_renders_as_transformers(family):
    """The calls and their results sent back: the next prompt is transformers' rendering."""
    from transformers import AutoTokenizer

    logging.getLogger("transformers").setLevel(logging.ERROR)
    name, srv, model = family
    as_objects = FAMILIES[name][5]
    message = answer(name, srv).choices[0].message
    # As a client sends the turn back: content null beside the calls.
    assistant = {"role": "assistant", "content": message.content,
                 "tool_calls": [c.model_dump() for c in message.tool_calls]}
    conversation = MESSAGES + [assistant] + [
        {"role": "tool", "tool_call_id": c.id, "content": r}
        for c, r in zip(message.tool_calls, RESULTS)]
    resp = srv.client().chat.completions.create(
        model=MODEL_NAME, messages=conversation, tools=TOOLS, max_completion_tokens=1,
        temperature=0, extra_body={"return_token_ids": True})
    prompt_ids = resp.model_extra["prompt_token_ids"]

    reference = copy.deepcopy(conversation)
    for call in reference[len(MESSAGES)]["tool_calls"]:
        assert isinstance(call["function"]["arguments"], str)  # as OpenAI sends them
        if as_objects:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    hf = AutoTokenizer.from_pretrained(str(model))
    if reference[len(MESSAGES)]["content"] is None and name != "deepseek_v3":
        # transformers drops the null content, on which these templates fail: latent renders it
        # as "" (ShapeToolCallTurns), and so does the reference.
        reference[len(MESSAGES)]["content"] = ""
    # DeepSeek V3's template writes the calls only beside a null content, which latent keeps for
    # it: the reference renders the conversation as sent (none_kept_rendering).
    text = (none_kept_rendering(hf, reference, TOOLS) if name == "deepseek_v3" else
            hf.apply_chat_template(reference, tools=TOOLS, add_generation_prompt=True,
                                   tokenize=False))
    assert hf.decode(prompt_ids, skip_special_tokens=False) == text
    assert prompt_ids == hf.encode(text, add_special_tokens=False)
    # The rendered prompt holds the results and (where the template writes them) the calls: the
    # shared Kimi K2 template predates tool calls in history.
    assert RESULTS[0] in text
    if name != "kimi_k2":
        assert "get_weather" in text.split(MESSAGES[1]["content"])[-1]
    if as_objects:
        assert "<arg_value>Paris</arg_value>" in text and "raw_arguments" not in text


# The session's logic is the same for every family: two of them suffice.
@pytest.mark.parametrize("family", ["deepseek_v31", "glm45"], indirect=True)
def test_no_parsing_without_tools_or_with_tool_choice_none(family):
    name, srv, _ = family
    pieces = FAMILIES[name][2]
    raw = "".join(pieces)
    for kwargs in ({"tool_choice": "none"}, {"tools": None}):
        args = {k: v for k, v in kwargs.items() if v is not None}
        if "tools" in kwargs:
            resp = srv.client().chat.completions.create(
                model=MODEL_NAME, messages=MESSAGES, max_completion_tokens=400, temperature=0)
        else:
            resp = create(srv, False, **args)
        message = resp.choices[0].message
        assert resp.choices[0].finish_reason == "stop"
        assert not message.tool_calls
        # The markup is content, as the model wrote it (after its reasoning, if any).
        expected = raw.split("</think>", 1)[1] if "</think>" in raw else raw
        assert message.content == expected


def test_auto_parser_in_the_log(family):
    name, srv, _ = family
    if FAMILIES[name][1] == "auto":
        assert f"tool-call parser: {name} (auto" in srv.log()
    objects = "objects" if FAMILIES[name][5] else "JSON text"
    assert f"reads tool-call arguments as {objects}" in srv.log()


def test_markers_marked_special_reach_the_parser(chat_model, tokenizer, tmp_path):
    """Kimi K2's and GLM-4.5's tokenizers mark their tool-call markers special: a request with
    tools still decodes them (skip_special_tokens drops only the other special tokens), so the
    calls parse; without tools they are skipped like any special token. Here DeepSeek's markers
    are made special in a copy of its tokenizer."""
    model = tmp_path / "special"
    model.mkdir()
    for item in chat_model.iterdir():
        if item.name not in ("tokenizer.json", "tokenizer_config.json"):
            (model / item.name).symlink_to(item)
    data = json.loads((chat_model / "tokenizer.json").read_text())
    for token in data["added_tokens"]:
        if "tool▁" in token["content"]:
            token["special"] = True
    (model / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    config = json.loads((chat_model / "tokenizer_config.json").read_text())
    for token in config.get("added_tokens_decoder", {}).values():
        if "tool▁" in token["content"]:
            token["special"] = True
    (model / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False))
    (model / "chat_template.jinja").write_text((TEMPLATES / "deepseek-v3.1.jinja").read_text())
    pieces = FAMILIES["deepseek_v31"][2]
    ids = [i for piece in pieces for i in tokenizer.encode(piece, add_special_tokens=False).ids]
    (tmp_path / "replay.json").write_text(json.dumps(ids))
    srv = LatentServer(model, tmp_path / "serve.log", *SERVER_FLAGS, "--debug-replay",
                       str(tmp_path / "replay.json"))
    try:
        assert "tool-call markers the tokenizer marks special (kept in the output of requests " \
               "with tools): 5" in srv.log()
        resp = create(srv, False)
        assert resp.choices[0].finish_reason == "tool_calls"
        assert resp.choices[0].message.content == "Let me check."
        check_calls([(c.id, c.function.name, c.function.arguments)
                     for c in resp.choices[0].message.tool_calls], "deepseek_v31")
        plain = srv.client().chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_completion_tokens=400, temperature=0)
        text = plain.choices[0].message.content
        assert "get_weather" in text and "tool▁" not in text
    finally:
        assert srv.stop() == 0, srv.log()


def post_error(srv, body):
    status, resp = srv.post("/v1/chat/completions", dict({"model": MODEL_NAME}, **body))
    assert status == 400, resp
    return resp["error"]


def test_bad_tool_requests(chat_model, tmp_path):
    srv = LatentServer(chat_model, tmp_path / "serve.log", *SERVER_FLAGS)
    try:
        base = {"messages": MESSAGES, "tools": TOOLS}
        cases = [
            ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
             "not among 'tools'"),
            ({"tool_choice": "sometimes"}, "tool_choice", "must be \"auto\""),
            ({"tools": None, "tool_choice": "required"}, "tool_choice", "requires 'tools'"),
            ({"tools": [{"type": "function", "function": {"description": "x"}}]},
             "tools[0].function.name", "is required"),
            ({"tools": [{"type": "function", "function": {"name": "a b"}}]},
             "tools[0].function.name", "without whitespace"),
            ({"tools": [TOOLS[0], TOOLS[0]]}, "tools[1].function.name", "two tools"),
            ({"tools": [{"type": "retrieval"}]}, "tools[0].type", "must be \"function\""),
            ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
             "tools[0].function.parameters", "an object"),
            ({"messages": MESSAGES + [{"role": "assistant", "tool_calls": [{"id": "c"}]}]},
             "messages[2].tool_calls[0].function", "is required"),
            ({"messages": MESSAGES + [{"role": "assistant", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": 3}}]}]},
             "messages[2].tool_calls[0].function.arguments", "a string"),
            ({"messages": MESSAGES + [{"role": "tool", "tool_call_id": 7, "content": "x"}]},
             "messages[2].tool_call_id", "a string"),
        ]
        for change, param, words in cases:
            body = dict(base, **change)
            body = {k: v for k, v in body.items() if v is not None}
            error = post_error(srv, body)
            assert error["param"] == param, (change, error)
            assert words in error["message"], (change, error)
    finally:
        assert srv.stop() == 0, srv.log()


def test_glm_arguments_must_be_an_object(chat_model, tmp_path):
    """GLM-4.5's template takes the arguments apart: text that is not a JSON object is a 400."""
    model = model_with_template(chat_model, "glm-4.5.jinja", tmp_path / "glm")
    srv = LatentServer(model, tmp_path / "serve.log", *SERVER_FLAGS)
    try:
        call = {"id": "c", "type": "function",
                "function": {"name": "get_weather", "arguments": "[1, 2]"}}
        error = post_error(srv, {"messages": MESSAGES + [
            {"role": "assistant", "content": "", "tool_calls": [call]}], "tools": TOOLS})
        assert error["param"] == "messages[2].tool_calls[0].function.arguments"
        assert "JSON object" in error["message"]
    finally:
        assert srv.stop() == 0, srv.log()


# A round trip as OpenAI clients send it: the assistant turn's content null beside its call.
NULL_CONTENT_TURNS = [
    {"role": "user", "content": "Weather in Z?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Z"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]


def served_prompt(srv, messages) -> str:
    """The prompt the server renders for `messages` (with TOOLS), through /tokenize and
    /detokenize."""
    status, out = srv.post("/tokenize", {"model": MODEL_NAME, "messages": messages, "tools": TOOLS,
                                         "add_generation_prompt": True,
                                         "add_special_tokens": False})
    assert status == 200, out
    status, out = srv.post("/detokenize", {"model": MODEL_NAME, "tokens": out["tokens"]})
    assert status == 200, out
    return out["prompt"]


def test_null_content_beside_calls_renders_as_each_template_wants(chat_model, tmp_path):
    """DeepSeek V3's template writes an assistant turn's calls only under `content is none`: the
    server keeps the null content for it (found by probing the template at start-up), so the call
    precedes its output, as jinja2 renders the conversation. Qwen3's fails on none (`'</think>' in
    content`): it gets "", as transformers' users send."""
    from transformers import AutoTokenizer

    logging.getLogger("transformers").setLevel(logging.ERROR)
    absent = copy.deepcopy(NULL_CONTENT_TURNS)
    del absent[1]["content"]
    qwen3 = json.loads((REPO.parent / "shared" / "tokenizers" / "qwen3" /
                        "tokenizer_config.json").read_text())["chat_template"]
    for name, template in (("deepseek_v3", None), ("qwen3", qwen3)):
        model = tmp_path / name
        model.mkdir()
        for item in chat_model.iterdir():
            (model / item.name).symlink_to(item)
        if template:
            (model / "chat_template.jinja").write_text(template)
        hf = AutoTokenizer.from_pretrained(str(model))
        srv = LatentServer(model, tmp_path / f"{name}.log", *SERVER_FLAGS)
        try:
            text = served_prompt(srv, NULL_CONTENT_TURNS)
            assert served_prompt(srv, absent) == text  # no content key: the same
            if name == "deepseek_v3":
                assert text == none_kept_rendering(hf, NULL_CONTENT_TURNS, TOOLS)
                assert ("<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
                        "<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Z\"}\n```"
                        "<｜tool▁call▁end｜>") in text
                assert "<｜Assistant｜><｜end▁of▁sentence｜>" not in text
                assert 'a null content beside them as none' in srv.log()
            else:
                reference = copy.deepcopy(NULL_CONTENT_TURNS)
                reference[1]["content"] = ""
                assert text == hf.apply_chat_template(reference, tools=TOOLS, tokenize=False,
                                                      add_generation_prompt=True)
                assert ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Z"}}\n'
                        '</tool_call>') in text
                assert 'a null content beside them as ""' in srv.log()
            assert "<tool_response>\nsunny" in text or "sunny<｜tool▁output▁end｜>" in text
        finally:
            assert srv.stop() == 0, srv.log()


def test_deeply_nested_arguments_are_a_400(chat_model, tmp_path):
    """Arguments as JSON text escape the body's depth check (it skips strings); parsed for GLM-4.5's
    template, 60,000 levels overflowed the stack where the object was copied, killing the server.
    Now a 400 naming the field, and the server answers the next request."""
    model = model_with_template(chat_model, "glm-4.5.jinja", tmp_path / "glm")
    srv = LatentServer(model, tmp_path / "serve.log", *SERVER_FLAGS)
    try:
        deep = '{"a":' + "[" * 60000 + "]" * 60000 + "}"
        call = {"id": "c", "type": "function",
                "function": {"name": "get_weather", "arguments": deep}}
        messages = MESSAGES + [{"role": "assistant", "content": "", "tool_calls": [call]}]
        body = {"model": MODEL_NAME, "messages": messages, "tools": TOOLS, "max_tokens": 1}
        for path in ("/v1/chat/completions", "/tokenize"):
            status, resp = srv.post(path, body)
            assert status == 400, resp
            assert resp["error"]["param"] == "messages[2].tool_calls[0].function.arguments"
            assert "nests deeper than 64 levels" in resp["error"]["message"]
        status, resp = srv.post("/v1/chat/completions", {"model": MODEL_NAME, "messages": MESSAGES,
                                                         "max_tokens": 1})
        assert status == 200, resp
    finally:
        assert srv.stop() == 0, srv.log()


def test_unknown_parser_is_refused_before_loading(chat_model):
    import subprocess

    from e2e_harness import LATENT

    bad = subprocess.run([str(LATENT), "serve", "--model", str(chat_model), "--port", "0",
                          "--tool-call-parser", "hermes"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "unknown parser 'hermes'" in bad.stderr, bad.stderr
    assert "deepseek_v32 (DSML)" in bad.stderr


@pytest.mark.parametrize("family", ["deepseek_v3", "glm45"], indirect=True)
def test_parallel_tool_calls_false_keeps_the_first_call(family):
    """parallel_tool_calls false: the model writes two calls, the response keeps the first (vLLM's
    maybe_filter_parallel_tool_calls: tool_calls[:1] whole, only index-0 deltas streamed), with
    the content and finish_reason "tool_calls" as before; a second call cut short no longer holds
    the finish back, since it would not be kept."""
    name, srv, _ = family
    content = FAMILIES[name][3]
    resp = create(srv, False, parallel_tool_calls=False).choices[0]
    assert resp.finish_reason == "tool_calls"
    assert resp.message.content == content
    assert [(c.function.name, json.loads(c.function.arguments))
            for c in resp.message.tool_calls] == CALLS[:1]
    s_content, _, s_calls, finish, deltas = streamed(srv, parallel_tool_calls=False)
    assert finish == "tool_calls" and s_content == (content or "")
    assert [(n, json.loads(a)) for _, n, a in s_calls] == CALLS[:1]
    assert deltas and all(d.index == 0 for d in deltas)
    # Cut inside the second call's markup, before its name.
    resp = create(srv, False, parallel_tool_calls=False, stop=["search"]).choices[0]
    assert resp.finish_reason == "tool_calls"
    assert [c.function.name for c in resp.message.tool_calls] == ["get_weather"]
    # true (the default) keeps both.
    both = create(srv, False, parallel_tool_calls=True).choices[0].message.tool_calls
    assert [c.function.name for c in both] == ["get_weather", "search"]


@pytest.mark.parametrize("family", ["deepseek_v3"], indirect=True)
def test_call_cut_short_does_not_finish_tool_calls(family, tokenizer):
    """finish_reason "tool_calls" says every call is complete (its end marker came): a call cut by
    a stop string finishes "stop", as one cut by max_tokens finishes "length", streamed and not,
    keeping the arguments so far. Cut inside the second call's markup before its name ("search"),
    the first call is complete but the turn is not: "stop", and the cut markup is not content. A
    stop string between the calls still gives "tool_calls"."""
    _, srv, _ = family
    pieces = FAMILIES["deepseek_v3"][2]
    cut_args = '{"city": "Paris", "days": 3'  # V3 closes its arguments with "}\n```".
    first = ("get_weather", cut_args + "}")

    def tokens(n):
        return sum(len(tokenizer.encode(p, add_special_tokens=False).ids) for p in pieces[:n])

    cases = [({"stop": ["}\n```"]}, "stop", [("get_weather", cut_args)]),
             ({"max_completion_tokens": tokens(2)}, "length",
              [("get_weather", '{"city": "Paris",')]),
             ({"stop": ["search"]}, "stop", [first]),
             ({"max_completion_tokens": tokens(4) + 1}, "length", [first]),
             ({"stop": ["\n<｜tool▁call▁begin｜>"]}, "tool_calls", [first])]
    for kwargs, finish, calls in cases:
        resp = create(srv, False, **kwargs).choices[0]
        assert resp.finish_reason == finish, kwargs
        assert [(c.function.name, c.function.arguments) for c in resp.message.tool_calls] == \
            calls, kwargs
        assert resp.message.content is None, kwargs
        content, _, s_calls, s_finish, _ = streamed(srv, **kwargs)
        assert s_finish == finish, kwargs
        assert [c[1:] for c in s_calls] == calls, kwargs
        assert content == "", kwargs


def test_required_calls_cut_or_repeating_a_key_do_not_finish_tool_calls(chat_model, tokenizer,
                                                                         tmp_path):
    """tool_choice "required" (the model replays the array, not sampled under the grammar): cut
    by a stop string before the second call's name, the first call stays but the turn did not
    end with its calls complete: "stop", not "tool_calls" with the second call silently dropped.
    An element with a second "parameters" is malformed (its arguments would be two objects): the
    call stays as it stands, not complete, and the text from the second key on is content."""
    text = ('[{"name":"search","parameters":{"query":"x"}},\n {"name":"get_weather",'
            '"parameters":{"city":"Paris"},"parameters":{"city":"Oslo"}}]')
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    (tmp_path / "replay.json").write_text(json.dumps(ids))
    srv = LatentServer(chat_model, tmp_path / "serve.log", *SERVER_FLAGS, "--debug-replay",
                       str(tmp_path / "replay.json"))
    search = ("search", '{"query": "x"}')
    # Content beside forced calls is "", not null (vLLM's `content or ""`).
    cases = [({"stop": ['"get_weather",']}, "stop", [search], ""),
             ({}, "stop", [search, ("get_weather", '{"city": "Paris"}')],
              '"parameters":{"city":"Oslo"}}]')]
    try:
        for kwargs, finish, calls, content in cases:
            kwargs = dict(kwargs, tool_choice="required")
            resp = create(srv, False, **kwargs).choices[0]
            assert resp.finish_reason == finish, kwargs
            assert [(c.function.name, c.function.arguments)
                    for c in resp.message.tool_calls] == calls, kwargs
            assert resp.message.content == content, kwargs
            s_content, _, s_calls, s_finish, _ = streamed(srv, **kwargs)
            assert s_finish == finish, kwargs
            assert [c[1:] for c in s_calls] == calls, kwargs
            assert s_content == (content or ""), kwargs
    finally:
        assert srv.stop() == 0, srv.log()


def serve_pieces(chat_model, tokenizer, tmp_path, template, pieces, *flags) -> LatentServer:
    """A server with `template` whose model writes the pieces (each tokenized on its own)."""
    model = model_with_template(chat_model, template, tmp_path / "model")
    ids = [i for piece in pieces for i in tokenizer.encode(piece, add_special_tokens=False).ids]
    assert tokenizer.decode(ids, skip_special_tokens=False) == "".join(pieces)
    (tmp_path / "replay.json").write_text(json.dumps(ids))
    return LatentServer(model, tmp_path / "serve.log", *SERVER_FLAGS, "--debug-replay",
                        str(tmp_path / "replay.json"), *flags)


def both_ways(srv, **kwargs):
    """(content, reasoning, [(name, arguments)], finish_reason), non-streamed and streamed alike
    (a stream's empty content is a null message content)."""
    resp = create(srv, False, **kwargs).choices[0]
    whole = (resp.message.content, extra(resp.message, "reasoning_content"),
             [(c.function.name, c.function.arguments) for c in resp.message.tool_calls or []],
             resp.finish_reason)
    content, reasoning, calls, finish, _ = streamed(srv, **kwargs)
    assert (content, reasoning, [c[1:] for c in calls], finish) == \
        (whole[0] or "", whole[1] or "", whole[2], whole[3])
    return whole


def test_kimi_calls_inside_unclosed_reasoning(chat_model, tokenizer, tmp_path):
    """Kimi K2 may open its tool-call section inside reasoning it never closed: under
    `--reasoning-parser kimi_k2` the section's start (split over tokens here) ends the reasoning
    and goes on to the tool parser, as vLLM's kimi_k2 does, streamed and not; without tools the
    section is content after the reasoning."""
    section = ('<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0'
               '<|tool_call_argument_begin|>{"query": "x"}<|tool_call_end|>'
               '<|tool_calls_section_end|>')
    pieces = ["<think>I should search.", section[:12], section[12:30], section[30:]]
    srv = serve_pieces(chat_model, tokenizer, tmp_path, "kimi-k2.jinja", pieces,
                       "--reasoning-parser", "kimi_k2")
    try:
        assert both_ways(srv) == (None, "I should search.", [("search", '{"query": "x"}')],
                                  "tool_calls")
        assert both_ways(srv, tools=NOT_GIVEN) == (section, "I should search.", [], "stop")
    finally:
        assert srv.stop() == 0, srv.log()


def test_markup_that_does_not_parse_is_content_byte_for_byte(chat_model, tokenizer, tmp_path):
    """A section marker followed by no call: the whole text is content as the model wrote it,
    the whitespace before and after the markup included, streamed and not."""
    text = "Hi <｜tool▁calls▁begin｜>oops not a call \n"
    srv = serve_pieces(chat_model, tokenizer, tmp_path, "deepseek-v3.1.jinja", [text])
    try:
        assert both_ways(srv) == (text, None, [], "stop")
    finally:
        assert srv.stop() == 0, srv.log()


def test_glm_repeated_key_and_python_literals(chat_model, tokenizer, tmp_path):
    """GLM's key/value arguments as vLLM reads them: a repeated key's last value wins (valid JSON,
    the key in its first place), and a value that is not JSON is read as a Python literal
    (`True`, `{'n': None}`) unless the schema says string; streamed and not alike."""
    tools = TOOLS + [{"type": "function", "function": {
        "name": "lookup", "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "safe": {"type": "boolean"}, "note": {"type": "string"}}}}}]
    pieces = ["<tool_call>lookup\n<arg_key>query</arg_key>\n<arg_value>a</arg_value>\n",
              "<arg_key>safe</arg_key>\n<arg_value>True</arg_value>\n<arg_key>query</arg_key>\n",
              "<arg_value>b</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{'n': None}</arg_value>",
              "\n<arg_key>note</arg_key>\n<arg_value>None</arg_value>\n</tool_call>"]
    srv = serve_pieces(chat_model, tokenizer, tmp_path, "glm-4.5.jinja", pieces)
    try:
        arguments = '{"query": "b", "safe": true, "opts": {"n": null}, "note": "None"}'
        assert both_ways(srv, tools=tools) == (None, None, [("lookup", arguments)], "tool_calls")
    finally:
        assert srv.stop() == 0, srv.log()
