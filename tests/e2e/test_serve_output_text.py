"""An output's text as vLLM's detokenizer gives it, on tiny models with real tokenizers and
replayed outputs (--debug-replay):
- the text is what the output adds after the prompt's text (the detokenizer is primed with the
  prompt): a SentencePiece (llama2) completion keeps the leading space of its first token, as HF
  decodes prompt + output, and stop strings see that space;
- text that really holds U+FFFD (DeepSeek's token "����") comes out token by token, so a
  stop string made of it ends the choice where it completes;
- completions' logprobs.text_offset counts characters (vLLM's len() of Python strings), echo too;
- return_tokens_as_token_ids: logprob tokens and top_logprobs as "token_id:N" (completions and
  chat, streamed or not); chat's "bytes" of the sampled token are its text's, of an alternative
  its "token_id:N"'s, as vLLM gives them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e_harness import (MODEL_NAME, REPO, SERVER_FLAGS, LatentServer, chat_model,  # noqa: F401
                         sse_events)

C = "/v1/completions"
CHAT = "/v1/chat/completions"
LLAMA2 = REPO.parent / "shared" / "tokenizers" / "llama2"
FFFD_TOKEN = 10878  # DeepSeek V3's "����": the bytes EF BF BD four times, real text


@pytest.fixture(scope="module")
def llama2_model(tiny_models) -> Path:
    return tiny_models.get("deepseek_v3", "--tokenizer", str(LLAMA2))


@pytest.fixture(scope="module")
def hf_llama2():
    from transformers import AutoTokenizer

    # transformers 5's pipeline for llama2, as tests/tokenizer/test_tokenizer_parity.py uses.
    return AutoTokenizer.from_pretrained(str(LLAMA2)).backend_tokenizer


@pytest.fixture(scope="module")
def hf_deepseek(chat_model):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(chat_model / "tokenizer.json"))


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


# What the llama2 model replays: "▁provin", "り", "▁buffer".
LLAMA2_OUTPUT = [24899, 29516, 5496]


@pytest.fixture(scope="module")
def llama2_server(llama2_model, tmp_path_factory):
    srv = replay_server(llama2_model, tmp_path_factory.mktemp("llama2"), LLAMA2_OUTPUT)
    yield srv
    assert srv.stop() == 0, srv.log()


def test_a_sentencepiece_completion_keeps_its_leading_space(llama2_server, hf_llama2):
    prompt_ids = hf_llama2.encode("Hello").ids
    whole = hf_llama2.decode(prompt_ids + LLAMA2_OUTPUT, skip_special_tokens=True)
    prompt_text = hf_llama2.decode(prompt_ids, skip_special_tokens=True)
    assert whole == "Hello provinり buffer" and whole.startswith(prompt_text)
    expected = whole[len(prompt_text):]
    body = {"prompt": "Hello", "max_tokens": 3, "return_token_ids": True}
    choice = post(llama2_server, C, body)["choices"][0]
    assert choice["token_ids"] == LLAMA2_OUTPUT
    assert choice["text"] == expected == " provinり buffer"
    assert "".join(c["text"] for c in stream(llama2_server, C, body)) == expected
    echoed = post(llama2_server, C, {**body, "echo": True})["choices"][0]
    assert echoed["text"] == whole
    # Token-id prompts too, and a stop string that holds the space.
    assert post(llama2_server, C, {**body, "prompt": prompt_ids})["choices"][0]["text"] == expected
    for chunks in (None, True):
        stop = {**body, "stop": [" provin"]}
        if chunks:
            got = stream(llama2_server, C, stop)
            text, finish = "".join(c["text"] for c in got), got[-1]["finish_reason"]
            stop_reason = got[-1]["stop_reason"]
        else:
            got = post(llama2_server, C, stop)["choices"][0]
            text, finish, stop_reason = got["text"], got["finish_reason"], got["stop_reason"]
        assert (text, finish, stop_reason) == ("", "stop", " provin")


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


# Pieces whose tokens are whole characters, with characters of 2 and 3 UTF-8 bytes.
PIECES = ["Hello", " wörld", " 中文", " Grüße", "!"]


def test_text_offsets_count_characters(chat_model, hf_deepseek, tmp_path):
    ids = []
    for piece in PIECES:
        ids += hf_deepseek.encode(piece, add_special_tokens=False).ids
    starts = [len(hf_deepseek.decode(ids[:i])) for i in range(len(ids))]
    assert all("\ufffd" not in hf_deepseek.decode(ids[:i]) for i in range(len(ids) + 1))
    srv = replay_server(chat_model, tmp_path, ids)
    try:
        body = {"prompt": "Hi", "max_tokens": len(ids), "logprobs": 0}
        choice = post(srv, C, body)["choices"][0]
        assert choice["text"] == "".join(PIECES)
        assert choice["logprobs"]["text_offset"] == starts
        streamed = [o for c in stream(srv, C, body) if c["logprobs"]
                    for o in c["logprobs"]["text_offset"]]
        assert streamed == starts
        # Echo: the prompt's tokens from 0, the output's after the prompt's characters.
        prompt = "Grüße, 世界"
        prompt_ids = hf_deepseek.encode(prompt, add_special_tokens=False).ids
        echoed = post(srv, C, {**body, "prompt": prompt_ids, "echo": True})["choices"][0]
        prompt_text = hf_deepseek.decode(prompt_ids)
        assert echoed["text"] == prompt_text + "".join(PIECES)
        offsets = echoed["logprobs"]["text_offset"]
        assert offsets[:len(prompt_ids)] == [len(hf_deepseek.decode(prompt_ids[:i]))
                                            for i in range(len(prompt_ids))]
        assert offsets[len(prompt_ids):] == [len(prompt_text) + s for s in starts]
    finally:
        assert srv.stop() == 0, srv.log()


def test_return_tokens_as_token_ids(chat_model, hf_deepseek, tmp_path):
    ids = hf_deepseek.encode("Hello wörld", add_special_tokens=False).ids
    names = [f"token_id:{i}" for i in ids]
    srv = replay_server(chat_model, tmp_path, ids)
    try:
        body = {"prompt": "Hi", "max_tokens": len(ids), "logprobs": 2,
                "return_tokens_as_token_ids": True}
        for chunks in (False, True):
            if chunks:
                entries = [c["logprobs"] for c in stream(srv, C, body) if c["logprobs"]]
                logprobs = {k: [v for e in entries for v in e[k]] for k in entries[0]}
            else:
                logprobs = post(srv, C, body)["choices"][0]["logprobs"]
            assert logprobs["tokens"] == names
            for top in logprobs["top_logprobs"]:
                assert top and all(k.startswith("token_id:") for k in top), top
            # text_offset stays where each token's text starts in the text.
            assert logprobs["text_offset"] == [len(hf_deepseek.decode(ids[:i]))
                                               for i in range(len(ids))]
        # Echoed prompt tokens too (vLLM builds the prompt's entries the same way).
        prompt_ids = hf_deepseek.encode("Hi there", add_special_tokens=False).ids
        echoed = post(srv, C, {**body, "prompt": prompt_ids, "echo": True})["choices"][0]
        assert echoed["logprobs"]["tokens"] == [f"token_id:{i}" for i in prompt_ids] + names
        plain = post(srv, C, {**body, "return_tokens_as_token_ids": False})["choices"][0]
        assert plain["logprobs"]["tokens"] == [hf_deepseek.decode([i]) for i in ids]

        chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": len(ids),
                "logprobs": True, "top_logprobs": 2, "return_tokens_as_token_ids": True}
        for chunks in (False, True):
            if chunks:
                content = [e for c in stream(srv, CHAT, chat) if c.get("logprobs")
                           for e in c["logprobs"]["content"]]
            else:
                content = post(srv, CHAT, chat)["choices"][0]["logprobs"]["content"]
            assert [e["token"] for e in content] == names
            for entry, token in zip(content, ids):
                assert entry["bytes"] == list(hf_deepseek.decode([token]).encode())
                assert len(entry["top_logprobs"]) == 2
                for alt in entry["top_logprobs"]:
                    assert alt["token"].startswith("token_id:")
                    assert alt["bytes"] == list(alt["token"].encode())
    finally:
        assert srv.stop() == 0, srv.log()


def test_a_prompts_byte_characters_stay_its_own(llama2_model, hf_llama2, tmp_path):
    """A prompt ending in "ꙮ" (<0xEA><0x99><0xAE>), an output starting with a lone <0xE4>:
    joined, the run is no UTF-8 and all U+FFFD; the output's text is its own decoding (it used
    to be lost). And an output of EOS alone after a cut character has no text (the prompt's
    U+FFFD does not come out)."""
    prompt = [1, 4335, 10020, 28747, 28705, 237, 156, 177]
    output = [231, 304, 868, 264, 1043, 4372]
    assert hf_llama2.decode(prompt, skip_special_tokens=True).endswith("\ua66e")
    srv = replay_server(llama2_model, tmp_path, output)
    try:
        body = {"prompt": prompt, "max_tokens": len(output)}
        expected = hf_llama2.decode(output, skip_special_tokens=True)
        assert expected.startswith("\ufffd and")
        assert post(srv, C, body)["choices"][0]["text"] == expected
        assert "".join(c["text"] for c in stream(srv, C, body)) == expected
    finally:
        assert srv.stop() == 0, srv.log()
    (tmp_path / "eos").mkdir()
    eos = replay_server(llama2_model, tmp_path / "eos", [2])
    try:
        cut = [1, 22557, 231, 187]  # "Hello" and two of 中's three bytes
        body = {"prompt": cut, "max_tokens": 3, "stop": ["\ufffd"]}
        for echo in (False, True):
            choice = post(eos, C, {**body, "echo": echo})["choices"][0]
            prompt_text = hf_llama2.decode(cut, skip_special_tokens=True) if echo else ""
            assert (choice["text"], choice["finish_reason"]) == (prompt_text, "stop")
        assert "".join(c["text"] for c in stream(eos, C, body)) == ""
    finally:
        assert eos.stop() == 0, eos.log()
