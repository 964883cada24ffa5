"""Reasoning output (`--reasoning-parser`) driven by the official `openai` client, with the
test-only `--debug-replay FILE` making a random tiny model emit chosen text: the text between
<think> and </think> goes to message.reasoning_content / delta.reasoning_content, the rest to
content; streamed and non-streamed give the same split, the streamed deltas concatenate exactly to
the non-streamed fields, a </think> split over several tokens works, chat_template_kwargs reaches
the template (DeepSeek V3.1's `thinking` switch decides whether the output starts inside the
reasoning), GLM-4.5's template (the model opens <think> itself) splits too, and with
`--reasoning-parser none` everything is content."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from e2e_harness import MODEL_NAME, REPO, SERVER_FLAGS, LatentServer, chat_model  # noqa: F401

TEMPLATES = REPO.parent / "shared" / "chat-templates"
MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]
REASONING = "Let me think. 2 + 2 is 4"
ANSWER = "The answer is 4."


@pytest.fixture(scope="module")
def tokenizer(chat_model):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(chat_model / "tokenizer.json"))


def encode_pieces(tokenizer, pieces: list[str]) -> list[int]:
    """Each piece tokenized on its own: the ids keep the cuts between pieces."""
    ids = []
    for piece in pieces:
        ids += tokenizer.encode(piece, add_special_tokens=False).ids
    return ids


def with_template(chat_model: Path, template: str, out: Path) -> Path:
    """The tiny chat model with another family's chat template (chat_template.jinja wins over
    tokenizer_config.json's)."""
    out.mkdir()
    for item in chat_model.iterdir():
        (out / item.name).symlink_to(item)
    (out / "chat_template.jinja").write_text((TEMPLATES / template).read_text())
    return out


def start(model: Path, tmp: Path, ids: list[int], *flags: str) -> LatentServer:
    replay = tmp / f"replay{len(list(tmp.iterdir()))}.json"
    replay.write_text(json.dumps({"ids": ids}))
    return LatentServer(model, tmp / f"{replay.stem}.log", *SERVER_FLAGS, "--debug-replay",
                        str(replay), *flags)


def reasoning_of(obj):
    return (obj.model_extra or {}).get("reasoning_content")


def chat(client, stream: bool, **kwargs):
    """One chat request; returns (reasoning, content, finish_reason, deltas). Streamed: the
    fields are the deltas' concatenation."""
    args = dict(model=MODEL_NAME, messages=MESSAGES, max_completion_tokens=64, temperature=0)
    args.update(kwargs)
    if not stream:
        resp = client.chat.completions.create(**args)
        message = resp.choices[0].message
        return reasoning_of(message), message.content, resp.choices[0].finish_reason, None
    chunks = list(client.chat.completions.create(stream=True, **args))
    deltas = [(reasoning_of(c.choices[0].delta), c.choices[0].delta.content) for c in chunks[1:]]
    reasoning = "".join(r or "" for r, _ in deltas)
    content = "".join(c or "" for _, c in deltas)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert len(finish) == 1
    return reasoning, content, finish[0], deltas


@pytest.fixture(scope="module")
def v31_model(chat_model, tmp_path_factory):
    return with_template(chat_model, "deepseek-v3.1.jinja", tmp_path_factory.mktemp("v31") / "m")


@pytest.fixture(scope="module")
def split_close_ids(tokenizer):
    # "</think>" over four tokens: "</", "th", "ink", ">".
    ids = encode_pieces(tokenizer, [REASONING, "</th", "ink>", ANSWER])
    pieces = [tokenizer.decode([i]) for i in ids]
    assert not any("</think>" in p for p in pieces) and "</" in pieces and "ink" in pieces
    assert tokenizer.decode(ids) == REASONING + "</think>" + ANSWER
    return ids


@pytest.fixture(scope="module")
def v31_server(v31_model, split_close_ids, tmp_path_factory):
    srv = start(v31_model, tmp_path_factory.mktemp("v31serve"), split_close_ids)
    yield srv
    assert srv.stop() == 0, srv.log()


def test_auto_picks_think_parser_from_template(v31_server):
    assert "reasoning parser: think (auto" in v31_server.log()
    assert "--debug-replay" in v31_server.log()


@pytest.mark.parametrize("kwargs", [{"thinking": True}, {"enable_thinking": True}])
def test_thinking_splits_reasoning_streamed_and_not(v31_server, kwargs):
    client = v31_server.client()
    body = {"chat_template_kwargs": kwargs}
    whole = chat(client, stream=False, extra_body=body)
    assert whole == (REASONING, ANSWER, "stop", None)
    reasoning, content, finish, deltas = chat(client, stream=True, extra_body=body)
    assert (reasoning, content, finish) == whole[:3]
    # Streamed token by token: the reasoning came in several deltas, then the answer, and no delta
    # carries a piece of the split marker.
    assert sum(1 for r, _ in deltas if r) >= 3
    first_content = next(i for i, (_, c) in enumerate(deltas) if c)
    assert all(not r for r, _ in deltas[first_content:])
    assert all("<" not in (r or "") + (c or "") for r, c in deltas)


def test_without_thinking_all_is_content(v31_server):
    # V3.1's template ends a non-thinking prompt with </think>: the output starts in the answer.
    client = v31_server.client()
    whole = chat(client, stream=False)
    assert whole == (None, REASONING + "</think>" + ANSWER, "stop", None)
    assert chat(client, stream=True)[:3] == ("", whole[1], "stop")


def test_max_tokens_inside_reasoning(v31_server, tokenizer):
    # Cut inside the reasoning: all of it is reasoning, finish_reason "length".
    n = len(tokenizer.encode(REASONING, add_special_tokens=False).ids) - 1
    body = {"chat_template_kwargs": {"thinking": True}}
    whole = chat(v31_server.client(), stream=False, max_completion_tokens=n, extra_body=body)
    # No content: null, as vLLM's reasoning parsers give None (the stream sends none).
    assert whole[1] is None and whole[2] == "length"
    assert REASONING.startswith(whole[0]) and len(whole[0]) < len(REASONING)
    assert chat(v31_server.client(), stream=True, max_completion_tokens=n, extra_body=body)[:3] == \
        (whole[0], "", "length")


def test_stop_string_in_answer(v31_server):
    body = {"chat_template_kwargs": {"thinking": True}}
    for stream in (False, True):
        reasoning, content, finish, _ = chat(v31_server.client(), stream=stream, stop=["is 4."],
                                             extra_body=body)
        assert (reasoning, content, finish) == (REASONING, "The answer ", "stop")


def test_parser_none_leaves_content_alone(v31_model, split_close_ids, tmp_path):
    srv = start(v31_model, tmp_path, split_close_ids, "--reasoning-parser", "none")
    try:
        client = srv.client()
        body = {"chat_template_kwargs": {"thinking": True}}
        resp = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, extra_body=body,
                                              max_completion_tokens=64)
        assert "reasoning_content" not in (resp.choices[0].message.model_extra or {})
        assert resp.choices[0].message.content == REASONING + "</think>" + ANSWER
        reasoning, content, _, _ = chat(client, stream=True, extra_body=body)
        assert (reasoning, content) == ("", REASONING + "</think>" + ANSWER)
    finally:
        assert srv.stop() == 0, srv.log()


def test_glm_template_model_opens_think(chat_model, tokenizer, tmp_path):
    # GLM-4.5 ends the prompt with its assistant tag; the model writes "\n<think>" itself.
    model = with_template(chat_model, "glm-4.5.jinja", tmp_path / "glm")
    ids = encode_pieces(tokenizer, ["\n<", "think>", REASONING, "</", "think>", "\n" + ANSWER])
    srv = start(model, tmp_path, ids)
    try:
        client = srv.client()
        whole = chat(client, stream=False)
        assert whole == (REASONING, "\n" + ANSWER, "stop", None)
        assert chat(client, stream=True)[:3] == whole[:3]
        # enable_thinking=false: the template closes an empty think block in the prompt, so the
        # same output is all content.
        body = {"chat_template_kwargs": {"enable_thinking": False}}
        text = tokenizer.decode(ids)
        assert chat(client, stream=False, extra_body=body)[:2] == (None, text)
    finally:
        assert srv.stop() == 0, srv.log()


def test_bad_flags_are_refused(chat_model, tmp_path):
    from e2e_harness import LATENT

    bad = subprocess.run([str(LATENT), "serve", "--model", str(chat_model), "--port", "0",
                          "--reasoning-parser", "qwen9"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "unknown parser 'qwen9'" in bad.stderr
    replay = tmp_path / "replay.json"
    replay.write_text("[1, -2]")
    bad = subprocess.run([str(LATENT), "serve", "--model", str(chat_model), "--host", "127.0.0.1",
                          "--port", "0", "--debug-replay", str(replay)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "entry 1 (-2) is not a token id" in bad.stderr, bad.stderr


def test_completion_text_offsets_count_held_back_text(chat_model, tokenizer, tmp_path):
    """text_offset is where each token's text starts in the choice's text, also after text that a
    partial stop string held back and let go (" x" of " xq"), streamed and not; a token past the
    cut of a stop string that matched starts at the cut."""
    pieces = ["Hello", ",", " world", ",", " x", "yz", " abc", " de", "f"]
    ids = encode_pieces(tokenizer, pieces)
    texts = [tokenizer.decode([i]) for i in ids]
    starts = [len("".join(texts[:i])) for i in range(len(ids))]
    srv = start(chat_model, tmp_path, ids)
    try:
        client = srv.client()
        resp = client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=len(ids),
                                         logprobs=0, stop=[" xq"])
        assert resp.choices[0].text == "".join(texts)
        assert resp.choices[0].logprobs.text_offset == starts
        chunks = list(client.completions.create(model=MODEL_NAME, prompt="hi",
                                                max_tokens=len(ids), logprobs=0, stop=[" xq"],
                                                stream=True))
        streamed = [o for c in chunks if c.choices and c.choices[0].logprobs
                    for o in c.choices[0].logprobs.text_offset]
        assert streamed == starts
        # " abc d" stops: the text ends before " abc", where the offsets of its tokens and of
        # " de" (which completed the match) go.
        resp = client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=len(ids),
                                         logprobs=0, stop=[" abc d"])
        full = "".join(texts)
        cut = full.find(" abc d")
        assert resp.choices[0].text == full[:cut]
        offsets = resp.choices[0].logprobs.text_offset
        assert len(offsets) < len(ids) and offsets[-1] == cut
        assert offsets == [min(s, cut) for s in starts[:len(offsets)]]
        # Streamed, the same offsets, also where the match spans three tokens (" de" is held past
        # the text let through while "f" is still to come): an entry past that text waits for
        # the cut (it went out at once, at its place in the uncut text).
        for stop in [" abc d", " abc def"]:
            whole = client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=len(ids),
                                              logprobs=0, stop=[stop])
            assert whole.choices[0].text == full[:cut]
            chunks = list(client.completions.create(model=MODEL_NAME, prompt="hi",
                                                    max_tokens=len(ids), logprobs=0, stop=[stop],
                                                    stream=True))
            streamed = [o for c in chunks if c.choices and c.choices[0].logprobs
                        for o in c.choices[0].logprobs.text_offset]
            assert streamed == whole.choices[0].logprobs.text_offset, stop
        # vLLM's include_stop_str_in_output: the text ends after the stop string.
        for stream in (False, True):
            resp = client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=len(ids),
                                             stop=[" abc d"], stream=stream,
                                             extra_body={"include_stop_str_in_output": True})
            text = ("".join(c.choices[0].text for c in resp if c.choices) if stream
                    else resp.choices[0].text)
            assert text == full[:cut] + " abc d", stream
    finally:
        assert srv.stop() == 0, srv.log()
