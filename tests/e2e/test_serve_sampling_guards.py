"""Sampling guards over the OpenAI API: `min_tokens` (vLLM's: EOS, stop_token_ids and stop strings
do not end a choice before it has that many tokens; a grammar that allows only EOS still wins),
its 400s, `logit_bias` and `allowed_token_ids` steering every draw (not the logprobs), and a
model whose logits overflow to NaN/inf: each request ends with a clear error
naming the problem rather than tokens, and the server keeps serving."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from e2e_harness import (MODEL_NAME, SERVER_FLAGS, chat_model, server,  # noqa: F401
                         sse_events, start_server)

C = "/v1/completions"
CHAT = "/v1/chat/completions"
PROMPT = "The quick brown fox"


def complete(server, **fields) -> dict:
    body = {"model": MODEL_NAME, "prompt": PROMPT, "temperature": 0.0, "max_tokens": 12,
            "ignore_eos": True, "logprobs": 0, "return_token_ids": True, **fields}
    status, out = server.post(C, body)
    assert status == 200, out
    return out["choices"][0]


def test_min_tokens_holds_off_stop_token_ids(server):
    plain = complete(server)
    first = plain["token_ids"][0]
    # Without min_tokens the first token is a stop id: one token, "stop".
    stopped = complete(server, stop_token_ids=[first])
    assert stopped["token_ids"] == [first] and stopped["finish_reason"] == "stop"
    for min_tokens in (1, 5, 12):
        held = complete(server, stop_token_ids=[first], min_tokens=min_tokens)
        ids = held["token_ids"]
        assert first not in ids[:min_tokens], (min_tokens, ids)
        assert len(ids) >= min_tokens
        if held["finish_reason"] == "stop":
            assert ids[-1] == first and len(ids) > min_tokens
    # The same ids sampled (seeded): n choices, streamed or not, all hold off.
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 8, "min_tokens": 8,
            "temperature": 1.0, "seed": 5, "n": 4, "ignore_eos": True, "return_token_ids": True,
            "stop_token_ids": sorted(set(plain["token_ids"][:4]))}
    status, out = server.post(C, body)
    assert status == 200, out
    for c in out["choices"]:
        assert len(c["token_ids"]) == 8 and c["finish_reason"] == "length", c
        assert not set(c["token_ids"]) & set(body["stop_token_ids"]), c


def test_min_tokens_holds_off_stop_strings(server):
    plain = complete(server)
    tokens = plain["logprobs"]["tokens"]
    stop = next(t for t in tokens[:4] if t.strip())
    assert complete(server, stop=[stop])["finish_reason"] == "stop"
    # Text of the first 12 tokens is not searched: all of it comes back, ended by length.
    held = complete(server, stop=[stop], min_tokens=12)
    assert (held["text"], held["finish_reason"]) == (plain["text"], "length")
    status, raw = server.request("POST", C, {
        "model": MODEL_NAME, "prompt": PROMPT, "temperature": 0.0, "max_tokens": 12,
        "ignore_eos": True, "stop": [stop], "min_tokens": 12, "stream": True})
    assert status == 200
    chunks = [json.loads(e) for e in sse_events(raw) if e != "[DONE]"]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == plain["text"]


def test_logit_bias_forces_and_bans_tokens(server):
    plain = complete(server)
    ids = plain["token_ids"]
    target = next(t for t in range(3, 200) if t not in ids)
    # +100 on a token the model never picked: greedy returns it every time; sampled too.
    forced = complete(server, logit_bias={str(target): 100})
    assert forced["token_ids"] == [target] * 12, forced
    # Its logprobs are the model's raw ones (vLLM's raw_logprobs): the bias does not make it ~0.
    assert forced["logprobs"]["token_logprobs"][0] < -0.5, forced["logprobs"]
    for body in ({"temperature": 1.0, "seed": 3, "n": 3},
                 {"temperature": 0.7, "top_p": 0.9, "presence_penalty": 2.0, "stream": False}):
        status, out = server.post(C, {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 6,
                                      "ignore_eos": True, "return_token_ids": True,
                                      "logit_bias": {str(target): 100.0}, **body})
        assert status == 200, out
        assert all(c["token_ids"] == [target] * 6 for c in out["choices"]), out
    # -100 on the greedy first token: another one comes first.
    banned = complete(server, logit_bias={str(ids[0]): -100})
    assert banned["token_ids"][0] != ids[0]
    assert ids[0] not in banned["token_ids"]
    # An empty object is no bias (OpenAI's clients send one by default).
    assert complete(server, logit_bias={})["token_ids"] == ids
    # Chat takes it too.
    status, out = server.post(CHAT, {"model": MODEL_NAME, "max_tokens": 4, "temperature": 0,
                                     "messages": [{"role": "user", "content": PROMPT}],
                                     "ignore_eos": True, "return_token_ids": True,
                                     "logit_bias": {str(target): 100}})
    assert status == 200, out
    assert out["choices"][0]["token_ids"] == [target] * 4, out


def test_allowed_token_ids_restrict_every_draw(server):
    allowed = [5, 17, 42]
    greedy = complete(server, allowed_token_ids=allowed)
    assert set(greedy["token_ids"]) <= set(allowed), greedy
    status, out = server.post(C, {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 10,
                                  "temperature": 1.5, "seed": 1, "n": 4, "ignore_eos": True,
                                  "return_token_ids": True, "allowed_token_ids": allowed})
    assert status == 200, out
    drawn = {t for c in out["choices"] for t in c["token_ids"]}
    assert drawn <= set(allowed) and len(drawn) > 1, drawn


def test_a_grammar_that_allows_only_eos_wins_over_min_tokens(server):
    schema = {"type": "json_schema",
              "json_schema": {"name": "x", "schema": {"enum": ["a"]}}}
    status, out = server.post(C, {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 40,
                                  "min_tokens": 30, "temperature": 0.0,
                                  "response_format": schema})
    assert status == 200, out
    choice = out["choices"][0]
    assert json.loads(choice["text"]) == "a" and choice["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] < 30


@pytest.mark.parametrize("fields,words", [
    ({"min_tokens": -1}, "'min_tokens' must be >= 0"),
    ({"min_tokens": 1.5}, "integer"),
    ({"min_tokens": "2"}, "integer"),
    ({"min_tokens": 5, "max_tokens": 4}, "at most"),
    ({"min_tokens": 17}, "at most max_tokens"),  # completions' default max_tokens is 16
    ({"repetition_penalty": 0.001}, "[0.01, 100]"),
    ({"repetition_penalty": 1e-39}, "[0.01, 100]"),
    ({"logprobs": 2, "top_logprobs": 2}, "'top_logprobs' is for chat completions"),
])
def test_bad_values_are_refused(server, fields, words):
    body = {"model": MODEL_NAME, "prompt": PROMPT, **fields}
    status, out = server.post(C, body)
    assert status == 400, out
    param = next(iter(k for k in fields if k not in ("max_tokens", "logprobs")))
    assert out["error"]["param"] == param, out
    assert words in out["error"]["message"], out


def test_chat_min_tokens_against_max_completion_tokens(server):
    status, out = server.post(CHAT, {"model": MODEL_NAME, "messages": [{"role": "user",
                                                                       "content": "hi"}],
                                     "max_completion_tokens": 3, "min_tokens": 4})
    assert status == 400 and out["error"]["param"] == "min_tokens", out


def overflowing_model(source: Path, out: Path) -> Path:
    """`source` with two lm_head rows at +-3e38 (finite, so the loader's check passes): their
    logits overflow to inf, and inf - inf in the dot products makes NaN."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, out)
    index = out / "model.safetensors.index.json"
    name = (json.loads(index.read_text())["weight_map"]["lm_head.weight"] if index.is_file()
            else "model.safetensors")
    tensors = load_file(out / name)
    w = tensors["lm_head.weight"]
    w[100] = 3e38
    w[200] = -3e38
    w[200, ::2] = 3e38
    save_file(tensors, out / name, metadata={"format": "pt"})
    assert torch.isfinite(w.float()).all()
    return out


def test_non_finite_logits_end_requests_with_an_error(chat_model, start_server, tmp_path):
    srv = start_server(*SERVER_FLAGS, model=overflowing_model(chat_model, tmp_path / "overflow"))
    cases = [{"temperature": 0.0}, {"temperature": 0.8, "seed": 3}, {"temperature": 0.8, "top_k": 5},
             {"temperature": 0.9, "top_p": 0.5, "seed": 1}, {"temperature": 0.0, "logprobs": 2},
             {"echo": True, "logprobs": 1, "max_tokens": 0}]
    for fields in cases:
        status, out = srv.post(C, {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 4,
                                   **fields})
        assert status == 500, (fields, out)
        assert "non-finite logits (NaN/inf)" in out["error"]["message"], (fields, out)
    status, raw = srv.request("POST", CHAT, {
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "stream": True})
    assert b"non-finite logits (NaN/inf)" in raw, raw
    assert srv.request("GET", "/health") == (200, b'{"status":"ok"}')
    metrics = srv.metrics()
    assert metrics["latent_cache_blocks_used"] == 0, metrics
