"""`latent serve` driven by the official `openai` client: completions and chat, streaming and not,
with usage; greedy output equal to `latent generate` on the same prompt ids, and the prompt ids and
text equal to transformers' tokenizer; logprobs, stop strings, n with seeds, several prompts at
once, prefix-cache hits reported as cached tokens, /v1/models, /tokenize and /detokenize, and
continue_final_message."""

from __future__ import annotations

import json
import math

import openai
import pytest

from conftest import latent_generate
from e2e_harness import CONTEXT, MODEL_NAME, chat_model, server, sse_events  # noqa: F401 (fixtures)

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a land far away, there lived",
]
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def hf_tokenizer(chat_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(chat_model)


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def extra(obj, key):
    """A response field outside OpenAI's schema (vLLM's return_token_ids)."""
    return obj.model_extra[key]


def test_health_and_models(server, client):
    status, body = server.request("GET", "/health")
    assert (status, body) == (200, b'{"status":"ok"}')
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert models.data[0].owned_by == "latent"


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_equals_generate(server, client, chat_model, hf_tokenizer, prompt):
    resp = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=MAX_TOKENS,
                                     temperature=0, extra_body={"return_token_ids": True})
    choice = resp.choices[0]
    # vLLM's place: the choice's prompt_token_ids, a flat list (none at the top level).
    prompt_ids = extra(choice, "prompt_token_ids")
    assert prompt_ids == hf_tokenizer(prompt)["input_ids"]
    assert "prompt_token_ids" not in resp.model_extra
    ids = extra(choice, "token_ids")
    expected = latent_generate(chat_model, prompt_ids, MAX_TOKENS)
    assert ids == expected
    assert choice.text == hf_tokenizer.decode(ids, skip_special_tokens=True)
    assert choice.finish_reason == ("length" if len(ids) == MAX_TOKENS else "stop")
    assert resp.object == "text_completion" and resp.model == MODEL_NAME and resp.id.startswith("cmpl-")
    assert resp.usage.prompt_tokens == len(prompt_ids)
    assert resp.usage.completion_tokens == len(ids)
    assert resp.usage.total_tokens == len(prompt_ids) + len(ids)
    assert resp.usage.prompt_tokens_details.cached_tokens >= 0


def test_completion_stream_equals_non_stream(client):
    prompt = PROMPTS[2]
    whole = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=MAX_TOKENS,
                                      temperature=0)
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=MAX_TOKENS,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text_chunks = [c for c in chunks if c.choices]
    assert len(text_chunks) >= 2, "the text came in one piece: not streamed"
    assert "".join(c.choices[0].text for c in text_chunks) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in text_chunks][-1] == whole.choices[0].finish_reason
    assert all(c.choices[0].finish_reason is None for c in text_chunks[:-1])
    # include_usage: every chunk has usage null, then one chunk with the usage and no choices.
    assert all(c.usage is None for c in text_chunks)
    assert not chunks[-1].choices and chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()
    assert len({c.id for c in chunks}) == 1


def streamed(server, path: str, body: dict) -> list[dict]:
    status, raw = server.request("POST", path, body)
    assert status == 200, raw
    return [json.loads(e) for e in sse_events(raw) if e != "[DONE]"]


def test_streamed_prompt_token_ids_and_continuous_usage(server, hf_tokenizer):
    """return_token_ids streamed: each choice's first chunk carries its prompt's ids (completions:
    in the choice; chat: the opening chunk's top level), as vLLM. continuous_usage_stats (with
    include_usage): every chunk's usage is its prompt's tokens and the choice's completion tokens
    sent so far (chat's opening chunk: none), without prompt_tokens_details; without it, null."""
    prompts = [PROMPTS[0], PROMPTS[1]]
    body = {"model": MODEL_NAME, "prompt": prompts, "n": 2, "max_tokens": 4, "temperature": 1.0,
            "ignore_eos": True, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    chunks = streamed(server, "/v1/completions", body)
    choices = [c for c in chunks if c["choices"]]
    seen: set[int] = set()
    made: dict[int, int] = {}
    for chunk in choices:
        choice = chunk["choices"][0]
        i = choice["index"]
        prompt_ids = hf_tokenizer(prompts[i // 2])["input_ids"]
        if i in seen:
            assert "prompt_token_ids" not in choice, chunk
        else:
            assert choice["prompt_token_ids"] == prompt_ids, chunk
            seen.add(i)
        made[i] = made.get(i, 0) + len(choice["token_ids"])
        assert chunk["usage"]["prompt_tokens"] == len(prompt_ids), chunk
        assert chunk["usage"]["completion_tokens"] == made[i], chunk
        assert chunk["usage"]["total_tokens"] == len(prompt_ids) + made[i], chunk
        assert "prompt_tokens_details" not in chunk["usage"], chunk  # as vLLM's chunks
        assert "prompt_token_ids" not in chunk
    assert seen == {0, 1, 2, 3} and made == {i: 4 for i in range(4)}
    # The usage chunk: the totals.
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 16
    for options in ({"include_usage": True},
                    {"include_usage": True, "continuous_usage_stats": False},
                    {"continuous_usage_stats": True}):
        body.update(stream_options=options)
        chunks = streamed(server, "/v1/completions", body)
        assert all(c.get("usage") is None for c in chunks if c["choices"]), options

    messages = [{"role": "user", "content": "Name a prime number."}]
    text = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 3, "temperature": 0,
            "ignore_eos": True, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    chunks = streamed(server, "/v1/chat/completions", body)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["prompt_token_ids"] == prompt_ids
    assert "prompt_token_ids" not in chunks[0]["choices"][0]
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    made = 0
    for chunk in chunks[:-1]:
        made += len(chunk["choices"][0].get("token_ids", []))
        # The opening chunk counts none, even when tokens came before the stream opened.
        assert chunk["usage"] == {"prompt_tokens": len(prompt_ids), "completion_tokens": made,
                                  "total_tokens": len(prompt_ids) + made}, chunk
    assert made == 3 and chunks[-1]["usage"]["completion_tokens"] == 3


def test_streamed_prompt_logprobs_zero_sends_none(server):
    """vLLM takes prompt_logprobs 0 with stream (it refuses only more) and streams none."""
    body = {"model": MODEL_NAME, "prompt": PROMPTS[0], "max_tokens": 2, "stream": True,
            "prompt_logprobs": 0}
    chunks = streamed(server, "/v1/completions", body)
    assert chunks and all("prompt_logprobs" not in c and "prompt_logprobs" not in c["choices"][0]
                          for c in chunks)
    status, err = server.request("POST", "/v1/completions", dict(body, prompt_logprobs=1))
    assert status == 400, err


def test_echo_with_logprobs_gives_prompt_logprobs(server):
    """vLLM computes prompt logprobs for echo with logprobs (prompt_logprobs = logprobs when not
    asked), so each completions choice carries them as if prompt_logprobs were asked: null for the
    first token, then the token's own entry (logprob, rank, decoded_token) and its best
    alternatives; echo's token_logprobs are those entries' logprobs, the first null. Streamed,
    vLLM's chunks have no prompt_logprobs (echo's logprobs are streamed)."""
    body = {"model": MODEL_NAME, "prompt": PROMPTS[2], "echo": True, "max_tokens": 2,
            "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    for k in (0, 2):
        status, implicit = server.request("POST", "/v1/completions", dict(body, logprobs=k))
        status2, explicit = server.request("POST", "/v1/completions",
                                           dict(body, logprobs=k, prompt_logprobs=k))
        assert status == status2 == 200, (implicit, explicit)
        (choice,) = json.loads(implicit)["choices"]
        (asked,) = json.loads(explicit)["choices"]
        assert choice == asked, k
        ids = choice["prompt_token_ids"]
        listed = choice["prompt_logprobs"]
        assert len(listed) == len(ids) and listed[0] is None
        token_logprobs = choice["logprobs"]["token_logprobs"]
        assert token_logprobs[0] is None and choice["logprobs"]["top_logprobs"][0] is None
        for i in range(1, len(ids)):
            entry = listed[i]
            assert next(iter(entry)) == str(ids[i]) and len(entry) in (k, k + 1), (i, entry)
            assert entry[str(ids[i])]["rank"] >= 1
            assert token_logprobs[i] == entry[str(ids[i])]["logprob"], i
        stream = streamed(server, "/v1/completions", dict(body, logprobs=k, stream=True))
        assert all("prompt_logprobs" not in c["choices"][0] for c in stream if c["choices"])
        streamed_lps = [v for c in stream if c["choices"] and c["choices"][0]["logprobs"]
                        for v in c["choices"][0]["logprobs"]["token_logprobs"]]
        assert streamed_lps == token_logprobs, k
    # Without logprobs, or without echo: none.
    for fields in ({}, {"echo": False, "logprobs": 1}):
        status, raw = server.request("POST", "/v1/completions", dict(body, **fields))
        choice = json.loads(raw)["choices"][0]
        assert status == 200 and choice.get("prompt_logprobs") is None, fields


def test_truncate_prompt_tokens(server, hf_tokenizer):
    """vLLM's truncate_prompt_tokens keeps the prompt's last N tokens: the output, usage and
    prompt_token_ids are those of sending them, and echo shows what is left; -1 keeps a prompt
    that fits the context beside max_tokens."""
    full = hf_tokenizer(PROMPTS[1])["input_ids"]
    assert len(full) > 3
    base = {"model": MODEL_NAME, "max_tokens": 4, "temperature": 0, "return_token_ids": True}
    status, cut = server.post("/v1/completions", {**base, "prompt": PROMPTS[1], "echo": True,
                                                  "truncate_prompt_tokens": 3})
    assert status == 200, cut
    status, sent = server.post("/v1/completions", {**base, "prompt": full[-3:]})
    assert status == 200, sent
    choice = cut["choices"][0]
    assert choice["prompt_token_ids"] == full[-3:] and cut["usage"]["prompt_tokens"] == 3
    assert choice["token_ids"] == sent["choices"][0]["token_ids"]
    assert choice["text"] == hf_tokenizer.decode(full[-3:], skip_special_tokens=True) + \
        sent["choices"][0]["text"]
    status, kept = server.post("/v1/completions", {**base, "prompt": PROMPTS[1],
                                                   "truncate_prompt_tokens": -1})
    assert status == 200 and kept["choices"][0]["prompt_token_ids"] == full, kept
    status, chat = server.post("/v1/chat/completions", {
        **base, "messages": [{"role": "user", "content": PROMPTS[1]}], "truncate_prompt_tokens": 2})
    assert status == 200 and len(chat["prompt_token_ids"]) == 2, chat
    assert chat["usage"]["prompt_tokens"] == 2


def test_stream_without_usage(client):
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=4,
                                            temperature=0, stream=True))
    assert all(c.choices and c.usage is None for c in chunks)


def test_chat_equals_generate(server, client, chat_model, hf_tokenizer):
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Name a prime number."}]
    resp = client.chat.completions.create(model=MODEL_NAME, messages=messages,
                                          max_completion_tokens=MAX_TOKENS, temperature=0,
                                          extra_body={"return_token_ids": True})
    text = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert extra(resp, "prompt_token_ids") == prompt_ids
    choice = resp.choices[0]
    ids = extra(choice, "token_ids")
    assert ids == latent_generate(chat_model, prompt_ids, MAX_TOKENS)
    assert choice.message.role == "assistant"
    assert choice.message.content == hf_tokenizer.decode(ids, skip_special_tokens=True)
    assert resp.object == "chat.completion" and resp.id.startswith("chatcmpl-")
    assert resp.usage.prompt_tokens == len(prompt_ids)
    assert resp.usage.completion_tokens == len(ids)

    # Streaming: a role chunk first, then content deltas, the same text and usage.
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=messages,
                                                 max_completion_tokens=MAX_TOKENS, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].object == "chat.completion.chunk"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == choice.message.content
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [choice.finish_reason]
    assert chunks[-1].usage.completion_tokens == resp.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == resp.usage.prompt_tokens


def test_chat_content_parts_and_max_tokens(client):
    """Content as a list of text parts; max_tokens (the older name) works for chat too."""
    as_text = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hello\nthere"}], max_tokens=5,
        temperature=0)
    as_parts = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hello"},
                                               {"type": "text", "text": "there"}]}],
        max_tokens=5, temperature=0)
    assert as_parts.choices[0].message.content == as_text.choices[0].message.content
    assert as_parts.usage.completion_tokens <= 5


def test_completion_logprobs(client):
    resp = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=6,
                                     temperature=0, logprobs=3)
    lp = resp.choices[0].logprobs
    n = resp.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0 and 1 <= len(top) <= 3
        # Greedy: the sampled token is the most likely one, listed among its alternatives.
        assert math.isclose(logprob, max(top.values()), abs_tol=1e-5)
        assert top[token] == logprob
    assert lp.text_offset == sorted(lp.text_offset)
    # "logprobs": 0 (sampled, so not the best): each position lists only the sampled token, as
    # OpenAI's up to logprobs + 1 entries and vLLM give it.
    resp = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=6,
                                     temperature=1.5, seed=3, logprobs=0)
    lp = resp.choices[0].logprobs
    assert lp.top_logprobs == [{t: v} for t, v in zip(lp.tokens, lp.token_logprobs)]


def test_chat_logprobs_streaming(client):
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
        temperature=0, logprobs=True, top_logprobs=2, stream=True,
        stream_options={"include_usage": True}))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs
               for e in c.choices[0].logprobs.content]
    assert len(entries) == chunks[-1].usage.completion_tokens
    for e in entries:
        assert len(e.top_logprobs) == 2
        assert math.isclose(e.logprob, e.top_logprobs[0].logprob, abs_tol=1e-5)
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert bytes(e.bytes).decode(errors="replace") == e.token


def test_stop_strings(client):
    prompt = PROMPTS[1]
    full = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=24,
                                     temperature=0, extra_body={"ignore_eos": True})
    text = full.choices[0].text
    assert len(text) >= 8, f"need a longer greedy text to cut: {text!r}"
    # A stop string from the middle of the text (which may span tokens).
    start = len(text) // 2
    stop = text[start:start + 3]
    expected = text[:text.find(stop)]
    for stream in (False, True):
        kwargs = dict(model=MODEL_NAME, prompt=prompt, max_tokens=24, temperature=0,
                      stop=["never appears \u2603", stop], extra_body={"ignore_eos": True})
        if stream:
            chunks = list(client.completions.create(stream=True, **kwargs))
            got = "".join(c.choices[0].text for c in chunks if c.choices)
            reason = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        else:
            resp = client.completions.create(**kwargs)
            got, reason = resp.choices[0].text, resp.choices[0].finish_reason
            assert resp.usage.completion_tokens <= full.usage.completion_tokens
        assert (got, reason) == (expected, "stop"), f"stream={stream}"
    # A stop string that never appears changes nothing.
    resp = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=24, temperature=0,
                                     stop="\u2603\u2603", extra_body={"ignore_eos": True})
    assert resp.choices[0].text == text and resp.choices[0].finish_reason == "length"


def test_n_samples_with_seed(client):
    kwargs = dict(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=8, temperature=1.0, n=3, seed=7)
    first = client.completions.create(**kwargs)
    again = client.completions.create(**kwargs)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert [c.text for c in first.choices] == [c.text for c in again.choices]
    assert len({c.text for c in first.choices}) > 1, "the samples of one request are all equal"
    assert 3 <= first.usage.completion_tokens <= 3 * 8
    other_seed = client.completions.create(**{**kwargs, "seed": 8})
    assert [c.text for c in other_seed.choices] != [c.text for c in first.choices]


def test_several_prompts_in_one_request(client):
    """Each prompt's n choices, in order, are those of the prompt alone (seeded). n > 1 needs a
    temperature: with 0 it is refused, as vLLM refuses it."""
    kwargs = dict(model=MODEL_NAME, max_tokens=6, temperature=1.0, seed=9, n=2)
    batch = client.completions.create(prompt=PROMPTS[:2], **kwargs)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    for i, prompt in enumerate(PROMPTS[:2]):
        alone = client.completions.create(prompt=prompt, **kwargs)
        assert [c.text for c in batch.choices[2 * i:2 * i + 2]] == [c.text for c in alone.choices]
    with pytest.raises(openai.BadRequestError, match="n must be 1 when using greedy sampling"):
        client.completions.create(prompt=PROMPTS[0], **{**kwargs, "temperature": 0})


def test_token_id_prompts(client, hf_tokenizer):
    ids = hf_tokenizer(PROMPTS[0])["input_ids"]
    by_text = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=6, temperature=0)
    by_ids = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=6, temperature=0)
    two = client.completions.create(model=MODEL_NAME, prompt=[ids, ids], max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert [c.text for c in two.choices] == [by_text.choices[0].text] * 2


def test_prefix_cache_hits_are_cached_tokens(client):
    prompt = " ".join(f"word{i}" for i in range(60))  # Several 16-token blocks.
    first = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=2, temperature=0)
    second = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=2, temperature=0)
    assert first.usage.prompt_tokens >= 48
    cached = second.usage.prompt_tokens_details.cached_tokens
    # Whole blocks only, and at least one token is always computed.
    assert 32 <= cached < second.usage.prompt_tokens and cached % 16 == 0
    assert second.choices[0].text == first.choices[0].text


def test_tokenize_and_detokenize(server, hf_tokenizer):
    text = "Hello, world! Ünïcödé and 数字 123"
    status, out = server.post("/tokenize", {"model": MODEL_NAME, "prompt": text})
    assert status == 200
    ids = hf_tokenizer(text)["input_ids"]
    assert out["tokens"] == ids and out["count"] == len(ids) and out["max_model_len"] == CONTEXT
    status, out = server.post("/detokenize", {"model": MODEL_NAME, "tokens": ids})
    assert (status, out["prompt"]) == (200, hf_tokenizer.decode(ids))
    messages = [{"role": "user", "content": "Hi"}]
    status, out = server.post("/tokenize", {"messages": messages})
    expected = hf_tokenizer(hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                             tokenize=False),
                            add_special_tokens=False)["input_ids"]
    assert (status, out["tokens"]) == (200, expected)


def test_continue_final_message(server, client, hf_tokenizer):
    """continue_final_message leaves the final assistant message open, as vLLM does through
    transformers' apply_chat_template(continue_final_message=True); add_generation_prompt is then
    off unless set. Both on is a 400; a final user message is continued as transformers does."""
    messages = [{"role": "user", "content": "Name a prime number."},
                {"role": "assistant", "content": "The smallest one is "}]
    text = hf_tokenizer.apply_chat_template(messages, continue_final_message=True, tokenize=False)
    assert text.endswith("The smallest one is ")
    expected = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    resp = client.chat.completions.create(
        model=MODEL_NAME, messages=messages, max_completion_tokens=2, temperature=0,
        extra_body={"continue_final_message": True, "return_token_ids": True})
    assert extra(resp, "prompt_token_ids") == expected
    status, out = server.post("/tokenize", {"messages": messages, "continue_final_message": True,
                                            "add_generation_prompt": False})
    assert (status, out["tokens"]) == (200, expected)
    for path in ("/v1/chat/completions", "/tokenize"):
        status, out = server.post(path, {"messages": messages, "model": MODEL_NAME,
                                         "continue_final_message": True,
                                         "add_generation_prompt": True})
        assert status == 400, (path, out)
        assert out["error"]["param"] == "continue_final_message", out
        assert "cannot both be true" in out["error"]["message"], out
    user_text = hf_tokenizer.apply_chat_template(messages[:1], continue_final_message=True,
                                                 tokenize=False)
    status, out = server.post("/tokenize", {"messages": messages[:1],
                                            "continue_final_message": True})
    assert (status, out["tokens"]) == (200, hf_tokenizer(user_text, add_special_tokens=False)
                                       ["input_ids"])
