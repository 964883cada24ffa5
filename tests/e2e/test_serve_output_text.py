"""An output's text as vLLM's detokenizer gives it, on tiny models with real tokenizers and
replayed outputs (--debug-replay):
- text that really holds U+FFFD (DeepSeek's token "����") comes out token by token, so a stop
  string made of it ends the choice where it completes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e_harness import (MODEL_NAME, REPO, SERVER_FLAGS, LatentServer, chat_model,  # noqa: F401
                         sse_events)

C = "/v1/completions"
FFFD_TOKEN = 10878  # DeepSeek V3's "����": the bytes EF BF BD four times, real text


def replay_server(model: Path, tmp: Path, ids: list[int]) -> LatentServer:
    replay = tmp / "replay.json"
    replay.write_text(json.dumps({"ids": ids}))
    return LatentServer(model, tmp / "serve.log", *SERVER_FLAGS, "--debug-replay", str(replay))


def post(srv, path: str, body: dict) -> dict:
    status, out = srv.post(path, {"model": MODEL_NAME, "temperature": 0, **body})
    assert status == 200, out
    return out


def stream(srv, path: str, body: dict) -> list[dict]:
    """Every streamed chunk's choices, in order."""
    status, raw = srv.request("POST", path, {"model": MODEL_NAME, "temperature": 0,
                                             "stream": True, **body})
    assert status == 200, raw
    return [c for e in sse_events(raw) if e != "[DONE]" for c in json.loads(e)["choices"]]


def test_text_of_replacement_characters_reaches_a_stop_string(chat_model, tmp_path):
    """"����" is text: a stop string of five U+FFFD completes with the second token, and the
    choice ends there, not after the 300 tokens that all decode to U+FFFD."""
    srv = replay_server(chat_model, tmp_path, [FFFD_TOKEN] * 300 + [5])
    try:
        body = {"prompt": "Hi", "max_tokens": 301, "stop": ["\ufffd" * 5]}
        resp = post(srv, C, body)
        assert resp["choices"][0]["finish_reason"] == "stop"
        assert resp["choices"][0]["text"] == ""
        assert resp["usage"]["completion_tokens"] == 2
        chunks = stream(srv, C, {**body, "stream_options": {"include_usage": True}})
        assert chunks[-1]["finish_reason"] == "stop"
        # Without the stop string, the text is every token's.
        resp = post(srv, C, {"prompt": "Hi", "max_tokens": 7})
        assert resp["choices"][0]["text"] == "\ufffd" * 28
    finally:
        assert srv.stop() == 0, srv.log()

