"""vLLM's `stop_reason` beside `finish_reason` on /v1/completions and /v1/chat/completions: the
stop string that ended a choice, else the `stop_token_ids` entry that did (a JSON int), else null
(EOS, which is checked first unless ignore_eos, or max_tokens). Every response choice carries it;
streamed, every completions chunk (null until the one with the finish_reason) and only the chat
chunk with the finish_reason, as vLLM serializes them. With n > 1 each choice has its own.

generation_config.json's EOS ids other than the tokenizer's are stop_token_ids to vLLM (unless
ignore_eos): one of them ends a choice with its id as the stop_reason, the tokenizer's EOS with
null.

As vLLM's detokenizer, the text of the EOS or stop id that ended a choice is left out of its text
(and of the stop-string search), unless include_stop_str_in_output, though token_ids, logprobs and
usage have the token."""

from __future__ import annotations

import json

import pytest

from conftest import EXTRA_EOS, TOKENIZER_EOS, stop_token_case, two_eos_model, unlisted_eos_model
from e2e_harness import (MODEL_NAME, SERVER_FLAGS, LatentServer, chat_model,  # noqa: F401
                         server, sse_events)

C = "/v1/completions"
CHAT = "/v1/chat/completions"


def body_for(path: str, **fields) -> dict:
    body = {"model": MODEL_NAME, "temperature": 0.0, "max_tokens": 12, "ignore_eos": True,
            "return_token_ids": True, **fields}
    if path == C:
        body.setdefault("prompt", "The quick brown fox")
    else:
        body.setdefault("messages", [{"role": "user", "content": "Name three rivers."}])
    return body


def respond(srv, path: str, **fields) -> list[dict]:
    """The response's choices."""
    status, out = srv.post(path, body_for(path, **fields))
    assert status == 200, out
    return out["choices"]


def stream(srv, path: str, **fields) -> list[dict]:
    """Every streamed chunk's choices, in order (the usage chunk has none)."""
    status, raw = srv.request("POST", path, body_for(path, stream=True, **fields))
    assert status == 200, raw
    return [c for e in sse_events(raw) if e != "[DONE]" for c in json.loads(e)["choices"]]


def check_stream(path: str, chunks: list[dict], finish: str, stop_reason) -> None:
    """One choice's chunks: stop_reason with the finish_reason, null or absent before it."""
    ends = [c for c in chunks if c.get("finish_reason")]
    assert len(ends) == 1, chunks
    assert ends[0]["finish_reason"] == finish, ends[0]
    assert "stop_reason" in ends[0] and ends[0]["stop_reason"] == stop_reason, ends[0]
    assert type(ends[0]["stop_reason"]) is type(stop_reason), ends[0]
    for c in chunks:
        if c is ends[0]:
            continue
        if path == C:
            assert "stop_reason" in c and c["stop_reason"] is None, c
        else:
            assert "stop_reason" not in c, c


def text_of(path: str, choice: dict) -> str:
    return choice["text"] if path == C else choice["message"]["content"]


def streamed_text(path: str, chunks: list[dict]) -> str:
    if path == C:
        return "".join(c["text"] for c in chunks)
    return "".join(c["delta"].get("content") or "" for c in chunks)


def first_new(ids: list[int], start: int = 2) -> int:
    """The first position from `start` whose token did not come before it."""
    return next(i for i in range(start, len(ids)) if ids[i] not in ids[:i])


@pytest.mark.parametrize("path", [C, CHAT])
def test_a_stop_token_id_is_the_stop_reason(server, path):
    (plain,) = respond(server, path)
    ids = plain["token_ids"]
    assert plain["finish_reason"] == "length" and "stop_reason" in plain
    assert plain["stop_reason"] is None, plain
    at = first_new(ids)
    stop = ids[at]
    (stopped,) = respond(server, path, stop_token_ids=[stop])
    assert stopped["token_ids"] == ids[:at + 1], (stopped, ids)
    assert stopped["finish_reason"] == "stop"
    assert stopped["stop_reason"] == stop and type(stopped["stop_reason"]) is int, stopped
    chunks = stream(server, path, stop_token_ids=[stop])
    check_stream(path, chunks, "stop", stop)
    assert [t for c in chunks for t in c.get("token_ids") or []] == ids[:at + 1]
    check_stream(path, stream(server, path), "length", None)


@pytest.mark.parametrize("path", [C, CHAT])
def test_a_stop_string_is_the_stop_reason(server, path):
    """The server's own stop-string matcher gives the string."""
    (plain,) = respond(server, path)
    text = plain["text"] if path == C else plain["message"]["content"]
    stop = next(text[i:i + 2] for i in range(2, len(text) - 2) if text[i:i + 2].strip())
    (stopped,) = respond(server, path, stop=["\u2603 never", stop])
    assert stopped["finish_reason"] == "stop" and stopped["stop_reason"] == stop, stopped
    check_stream(path, stream(server, path, stop=[stop]), "stop", stop)


def test_each_choice_has_its_own(server):
    """Two prompts, n = 2 each (seeded: n > 1 needs a temperature, as in vLLM): a stop id from
    the first prompt's first choice ends each choice that draws it with it; a choice that never
    draws it (the second prompt's) ends at max_tokens with null."""
    prompts = ["The quick brown fox", "Once upon a time"]
    sampled = dict(prompt=prompts, n=2, temperature=1.0, seed=11)
    outputs = [c["token_ids"] for c in respond(server, C, **sampled)]
    stop = next(t for t in outputs[0][2:] if t not in outputs[2] + outputs[3])
    body = dict(sampled, stop_token_ids=[stop])
    want = [("stop", stop) if stop in ids else ("length", None) for ids in outputs]
    choices = respond(server, C, **body)
    assert [(c["finish_reason"], c["stop_reason"]) for c in choices] == want, choices
    streamed: dict[int, list[dict]] = {}
    for c in stream(server, C, **body):
        streamed.setdefault(c["index"], []).append(c)
    assert sorted(streamed) == [0, 1, 2, 3]
    for index, (finish, stop_reason) in enumerate(want):
        check_stream(C, streamed[index], finish, stop_reason)


@pytest.fixture(scope="module")
def replay_server(chat_model, tmp_path_factory):
    """Every request emits 5, EOS, 7, 8, 9 (--debug-replay), then ends."""
    tmp = tmp_path_factory.mktemp("replay")
    eos = json.loads((chat_model / "generation_config.json").read_text())["eos_token_id"]
    eos = eos[0] if isinstance(eos, list) else eos
    assert eos not in (5, 7, 8, 9)
    (tmp / "replay.json").write_text(json.dumps({"ids": [5, eos, 7, 8, 9]}))
    srv = LatentServer(chat_model, tmp / "serve.log", *SERVER_FLAGS, "--debug-replay",
                       str(tmp / "replay.json"))
    srv.eos = eos
    yield srv
    assert srv.stop() == 0, srv.log()


@pytest.mark.parametrize("path", [C, CHAT])
def test_eos_is_checked_before_stop_token_ids(replay_server, path):
    eos = replay_server.eos
    # EOS ends it, though it is a stop id too: null, as vLLM.
    (c,) = respond(replay_server, path, ignore_eos=False, stop_token_ids=[eos])
    assert c["token_ids"] == [5, eos] and c["finish_reason"] == "stop", c
    assert "stop_reason" in c and c["stop_reason"] is None, c
    check_stream(path, stream(replay_server, path, ignore_eos=False, stop_token_ids=[eos]),
                 "stop", None)
    # Under ignore_eos the same id ends it as a stop id.
    (c,) = respond(replay_server, path, ignore_eos=True, stop_token_ids=[eos])
    assert c["token_ids"] == [5, eos] and c["stop_reason"] == eos, c
    check_stream(path, stream(replay_server, path, ignore_eos=True, stop_token_ids=[eos]),
                 "stop", eos)
    # The replay's own end is neither.
    (c,) = respond(replay_server, path, ignore_eos=True, stop_token_ids=[8])
    assert c["token_ids"] == [5, eos, 7, 8] and c["stop_reason"] == 8, c
    (c,) = respond(replay_server, path, ignore_eos=True)
    assert c["finish_reason"] == "stop" and c["stop_reason"] is None, c


@pytest.mark.parametrize("path", [C, CHAT])
def test_a_stop_tokens_text_is_not_output(server, path):
    """vLLM leaves the text of the stop id that ended a choice out of its text and out of the
    stop-string search (token_ids keep the id), unless include_stop_str_in_output, which keeps
    the text, still unsearched: so stop_reason is the id even where its text completes a stop
    string. Streamed as not. It used to be output, and the stop string it completed won."""
    prefixes = [""] + [text_of(path, respond(server, path, max_tokens=k)[0]) for k in range(1, 13)]
    ids = respond(server, path)[0]["token_ids"]
    at, stop = stop_token_case(prefixes, ids)
    token = ids[at]
    keep = {"include_stop_str_in_output": True}
    cases = [({}, prefixes[at]), ({"stop": [stop]}, prefixes[at]),
             (keep, prefixes[at + 1]), ({"stop": [stop], **keep}, prefixes[at + 1])]
    for fields, want in cases:
        (c,) = respond(server, path, stop_token_ids=[token], **fields)
        assert c["token_ids"] == ids[:at + 1] and c["finish_reason"] == "stop", (c, fields)
        assert c["stop_reason"] == token and text_of(path, c) == want, (c, fields, stop)
        chunks = stream(server, path, stop_token_ids=[token], **fields)
        check_stream(path, chunks, "stop", token)
        assert streamed_text(path, chunks) == want, (chunks, fields)
    # Without the stop id the same text completes the stop string.
    (c,) = respond(server, path, stop=[stop])
    assert c["stop_reason"] == stop and text_of(path, c) == prefixes[at + 1][:-len(stop)], c


def test_echo_and_logprobs_agree_with_the_text(server):
    """/v1/completions with echo and logprobs: the stop id has its logprob entry, at the end of
    the text (whose characters its text_offset counts), with the text left out; streamed the
    same."""
    prompt = "The quick brown fox"
    prefixes = [""] + [respond(server, C, max_tokens=k)[0]["text"] for k in range(1, 13)]
    ids = respond(server, C)[0]["token_ids"]
    at, _ = stop_token_case(prefixes, ids)
    fields = dict(stop_token_ids=[ids[at]], echo=True, logprobs=1)
    (c,) = respond(server, C, **fields)
    assert c["text"] == prompt + prefixes[at], c
    logprobs = c["logprobs"]
    n = len(logprobs["tokens"])
    assert n == len(respond(server, C, echo=True, logprobs=1, max_tokens=at + 1)[0]["logprobs"]
                    ["tokens"]), logprobs
    end = len(c["text"])
    assert logprobs["text_offset"][-1] == end and max(logprobs["text_offset"]) == end, logprobs
    chunks = stream(server, C, **fields)
    assert "".join(ch["text"] for ch in chunks) == c["text"]
    merged = {k: [v for ch in chunks if ch.get("logprobs") for v in ch["logprobs"][k]]
              for k in ("tokens", "token_logprobs", "text_offset")}
    assert merged["tokens"] == logprobs["tokens"] and merged["text_offset"] == logprobs["text_offset"]


@pytest.mark.parametrize("path", [C, CHAT])
def test_an_eos_text_is_left_out_too(replay_server, path):
    """Under skip_special_tokens false an EOS's text is output, but not that of the EOS that ended
    the choice (vLLM), unless include_stop_str_in_output; under ignore_eos it ends nothing."""
    eos = replay_server.eos
    raw = {"skip_special_tokens": False}
    first = text_of(path, respond(replay_server, path, max_tokens=1, **raw)[0])
    with_eos = text_of(path, respond(replay_server, path, max_tokens=2, **raw)[0])
    assert with_eos.startswith(first) and len(with_eos) > len(first), (first, with_eos)
    for fields, want in [({}, first), ({"include_stop_str_in_output": True}, with_eos)]:
        (c,) = respond(replay_server, path, ignore_eos=False, **raw, **fields)
        assert c["token_ids"] == [5, eos] and c["stop_reason"] is None, c
        assert text_of(path, c) == want, (c, fields)
        chunks = stream(replay_server, path, ignore_eos=False, **raw, **fields)
        assert streamed_text(path, chunks) == want, (chunks, fields)
    # A stop id that is EOS, under ignore_eos: its text is left out as any stop id's.
    (c,) = respond(replay_server, path, ignore_eos=True, stop_token_ids=[eos], **raw)
    assert c["stop_reason"] == eos and text_of(path, c) == first, c


@pytest.fixture(scope="module")
def two_eos_server(tiny_models, tmp_path_factory):
    """A server of two_eos_model: generation_config.json lists [EXTRA_EOS, TOKENIZER_EOS]."""
    srv = LatentServer(two_eos_model(tiny_models), tmp_path_factory.mktemp("serve") / "serve.log",
                       *SERVER_FLAGS)
    yield srv
    returncode = srv.stop()
    assert returncode == 0, f"latent serve exited {returncode}:\n{srv.log()}"


@pytest.mark.parametrize("path", [C, CHAT])
def test_an_extra_eos_id_is_the_stop_reason(two_eos_server, path):
    """The extra EOS id ends a choice with its id as the stop_reason, its text (" river") left out
    as a stop id's; the tokenizer's EOS, though listed after it, with null. logit_bias makes the
    random model draw the id asked for. Under ignore_eos the extra id ends nothing, and min_tokens
    holds it off as before. It used to give null for both."""
    srv = two_eos_server

    def run(token: int, **fields):
        fields = {"ignore_eos": False, "logit_bias": {str(token): 100}, **fields}
        return respond(srv, path, **fields)[0], stream(srv, path, **fields)

    extra, chunks = run(EXTRA_EOS)
    assert extra["token_ids"] == [EXTRA_EOS] and extra["finish_reason"] == "stop", extra
    assert extra["stop_reason"] == EXTRA_EOS and type(extra["stop_reason"]) is int, extra
    assert not text_of(path, extra), extra
    check_stream(path, chunks, "stop", EXTRA_EOS)
    assert not streamed_text(path, chunks), chunks
    eos, chunks = run(TOKENIZER_EOS)
    assert eos["token_ids"] == [TOKENIZER_EOS] and eos["finish_reason"] == "stop", eos
    assert "stop_reason" in eos and eos["stop_reason"] is None, eos
    check_stream(path, chunks, "stop", None)
    ignored, chunks = run(EXTRA_EOS, ignore_eos=True, max_tokens=3)
    assert ignored["token_ids"] == [EXTRA_EOS] * 3 and ignored["finish_reason"] == "length", ignored
    assert ignored["stop_reason"] is None, ignored
    check_stream(path, chunks, "length", None)
    (two,) = respond(srv, path, ignore_eos=False, logit_bias={str(EXTRA_EOS): 100}, min_tokens=2,
                     max_tokens=2)
    held, chunks = run(EXTRA_EOS, min_tokens=2)
    assert EXTRA_EOS not in two["token_ids"], two
    assert held["token_ids"] == two["token_ids"] + [EXTRA_EOS], (held, two)
    assert held["stop_reason"] == EXTRA_EOS and text_of(path, held) == text_of(path, two), held
    check_stream(path, chunks, "stop", EXTRA_EOS)


@pytest.fixture(scope="module")
def unlisted_eos_server(tiny_models, tmp_path_factory):
    """A server of unlisted_eos_model: generation_config.json lists EXTRA_EOS alone."""
    srv = LatentServer(unlisted_eos_model(tiny_models),
                       tmp_path_factory.mktemp("serve") / "serve.log", *SERVER_FLAGS)
    yield srv
    returncode = srv.stop()
    assert returncode == 0, f"latent serve exited {returncode}:\n{srv.log()}"


@pytest.mark.parametrize("path", [C, CHAT])
def test_the_tokenizers_eos_ends_a_choice_though_unlisted(unlisted_eos_server, path):
    """vLLM checks request.eos_token_id, the tokenizer's, whatever generation_config.json lists
    (Kimi K2's lists another id than its tokenizer's [EOS]): it ends a choice with a null
    stop_reason, plain and streamed; min_tokens holds it off. It used to end nothing."""
    srv = unlisted_eos_server
    fields = {"ignore_eos": False, "logit_bias": {str(TOKENIZER_EOS): 100}, "max_tokens": 4}
    (eos,) = respond(srv, path, **fields)
    assert eos["token_ids"] == [TOKENIZER_EOS] and eos["finish_reason"] == "stop", eos
    assert "stop_reason" in eos and eos["stop_reason"] is None, eos
    check_stream(path, stream(srv, path, **fields), "stop", None)
    (held,) = respond(srv, path, **fields, min_tokens=2)
    assert len(held["token_ids"]) == 3 and TOKENIZER_EOS not in held["token_ids"][:2], held
    assert held["token_ids"][2] == TOKENIZER_EOS and held["finish_reason"] == "stop", held
