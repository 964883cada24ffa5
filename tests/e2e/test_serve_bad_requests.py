"""A corpus of malformed requests: each gets the expected 4xx status with an OpenAI-style JSON error
({"error": {"message", "type", "param", "code"}}) naming the problem, and the server keeps serving
(/health and a real completion still work afterwards). Also the API key (401), the body size
limit (413), and prompts longer than the context or the cache."""

from __future__ import annotations

import json
import socket

import pytest

from e2e_harness import (CONTEXT, HOST, MODEL_NAME, TOKENIZER_DIR, chat_model,  # noqa: F401
                         raw_exchange, read_until, server, split_head_responses, split_responses,
                         start_server)

C = "/v1/completions"
CHAT = "/v1/chat/completions"
OK = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2}
MSG = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def with_(base: dict, **fields) -> dict:
    out = dict(base)
    for k, v in fields.items():
        if v is ...:
            out.pop(k, None)
        else:
            out[k] = v
    return out


# (id, method, path, body (dict: JSON; str/bytes: raw), status, param or None, words in message)
CASES = [
    # Not JSON, or not an object.
    ("truncated-json", "POST", C, "{", 400, None, "not valid JSON"),
    ("not-json", "POST", C, "prompt=hi", 400, None, "not valid JSON"),
    ("trailing-garbage", "POST", C, '{"prompt": "hi"} x', 400, None, "not valid JSON"),
    ("empty-body", "POST", C, "", 400, None, "not valid JSON"),
    ("json-array", "POST", C, "[]", 400, None, "JSON object"),
    ("json-string", "POST", C, '"hi"', 400, None, "JSON object"),
    ("invalid-utf8", "POST", C, b'{"prompt": "\xff\xfe"}', 400, None, "not valid JSON"),
    ("too-deep", "POST", C, '{"prompt": ' + "[" * 200 + "]" * 200 + "}", 400, None, "nested"),
    # Prompts.
    ("no-prompt", "POST", C, with_(OK, prompt=...), 400, "prompt", "required"),
    ("empty-prompt", "POST", C, with_(OK, prompt=""), 400, "prompt", "empty"),
    ("empty-prompt-list", "POST", C, with_(OK, prompt=[]), 400, "prompt", "empty"),
    ("empty-string-in-list", "POST", C, with_(OK, prompt=["a", ""]), 400, "prompt", "empty"),
    ("empty-id-list", "POST", C, with_(OK, prompt=[[]]), 400, "prompt", "empty"),
    ("prompt-number", "POST", C, with_(OK, prompt=42), 400, "prompt", "must be"),
    ("prompt-mixed-list", "POST", C, with_(OK, prompt=["a", 1]), 400, "prompt", "must be"),
    ("prompt-negative-id", "POST", C, with_(OK, prompt=[1, -1]), 400, "prompt", "outside the vocabulary"),
    ("prompt-id-past-vocab", "POST", C, with_(OK, prompt=[10**9]), 400, "prompt", "outside the vocabulary"),
    ("prompt-float-id", "POST", C, with_(OK, prompt=[1.5]), 400, "prompt", "token ids"),
    ("prompt-ids-past-context", "POST", C, with_(OK, prompt=[100] * (CONTEXT + 10)), 400, "prompt",
     "context length"),
    ("prompt-text-past-context", "POST", C, with_(OK, prompt="hello " * (CONTEXT + 10)), 400,
     "prompt", "context length"),
    ("prompt-plus-max-tokens-past-context", "POST", C,
     with_(OK, prompt=[100] * 300, max_tokens=CONTEXT - 200), 400, "max_tokens", "context length"),
    # Sampling fields.
    ("max-tokens-zero", "POST", C, with_(OK, max_tokens=0), 400, "max_tokens", "at least 1"),
    ("max-tokens-negative", "POST", C, with_(OK, max_tokens=-5), 400, "max_tokens", "at least 1"),
    ("max-tokens-string", "POST", C, with_(OK, max_tokens="16"), 400, "max_tokens", "integer"),
    ("max-tokens-fraction", "POST", C, with_(OK, max_tokens=1.5), 400, "max_tokens", "integer"),
    ("max-tokens-int64-max", "POST", C, with_(OK, max_tokens=2**63 - 1), 400, "max_tokens",
     "context length"),  # prompt + max_tokens used to wrap negative and pass every check
    ("chat-max-tokens-int64-max", "POST", CHAT, with_(MSG, max_tokens=2**63 - 1), 400, "max_tokens",
     "context length"),
    ("temperature-negative", "POST", C, with_(OK, temperature=-0.5), 400, "temperature", ">= 0"),
    ("temperature-past-float", "POST", C, with_(OK, temperature=1e300), 400, "temperature",
     "outside the range of a 32-bit float"),
    ("top-p-below-float", "POST", C, with_(OK, top_p=1e-300), 400, "top_p",
     "outside the range of a 32-bit float"),
    ("repetition-penalty-below-float", "POST", C, with_(OK, repetition_penalty=1e-300), 400,
     "repetition_penalty", "[0.01, 100]"),
    ("repetition-penalty-subnormal", "POST", C, with_(OK, repetition_penalty=1e-39), 400,
     "repetition_penalty", "[0.01, 100]"),  # logit / penalty overflowed to inf
    ("min-tokens-negative", "POST", C, with_(OK, min_tokens=-1), 400, "min_tokens", ">= 0"),
    ("min-tokens-fraction", "POST", C, with_(OK, min_tokens=0.5), 400, "min_tokens", "integer"),
    ("min-tokens-above-max-tokens", "POST", C, with_(OK, min_tokens=3), 400, "min_tokens",
     "at most"),
    ("completions-top-logprobs", "POST", C, with_(OK, logprobs=1, top_logprobs=1), 400,
     "top_logprobs", "integer 'logprobs'"),
    ("temperature-string", "POST", C, with_(OK, temperature="hot"), 400, "temperature", "number"),
    ("top-p-zero", "POST", C, with_(OK, top_p=0), 400, "top_p", "(0, 1]"),
    ("top-p-above-one", "POST", C, with_(OK, top_p=1.5), 400, "top_p", "(0, 1]"),
    ("top-p-negative", "POST", C, with_(OK, top_p=-1), 400, "top_p", "(0, 1]"),
    ("top-k-below-minus-one", "POST", C, with_(OK, top_k=-2), 400, "top_k", "top_k"),
    ("min-p-above-one", "POST", C, with_(OK, min_p=2), 400, "min_p", "[0, 1]"),
    ("n-zero", "POST", C, with_(OK, n=0), 400, "n", "'n'"),
    ("n-too-large", "POST", C, with_(OK, n=1000), 400, "n", "'n'"),
    ("n-string", "POST", C, with_(OK, n="2"), 400, "n", "integer"),
    ("logprobs-too-many", "POST", C, with_(OK, logprobs=50), 400, "logprobs", "logprobs"),
    ("logprobs-bool-for-completions", "POST", C, with_(OK, logprobs=True), 400, "logprobs", "integer"),
    ("presence-penalty-range", "POST", C, with_(OK, presence_penalty=3), 400, "presence_penalty", "[-2, 2]"),
    ("frequency-penalty-range", "POST", C, with_(OK, frequency_penalty=-3), 400,
     "frequency_penalty", "[-2, 2]"),
    ("repetition-penalty-zero", "POST", C, with_(OK, repetition_penalty=0), 400,
     "repetition_penalty", "repetition_penalty"),
    ("seed-string", "POST", C, with_(OK, seed="x"), 400, "seed", "integer"),
    ("stop-number", "POST", C, with_(OK, stop=5), 400, "stop", "string"),
    ("stop-empty-string", "POST", C, with_(OK, stop=[""]), 400, "stop", "empty"),
    ("stop-too-many", "POST", C, with_(OK, stop=[f"s{i}" for i in range(17)]), 400, "stop", "at most"),
    ("stream-string", "POST", C, with_(OK, stream="yes"), 400, "stream", "boolean"),
    ("stream-options-without-stream", "POST", C, with_(OK, stream_options={"include_usage": True}),
     400, "stream_options", "stream"),
    ("user-number", "POST", C, with_(OK, user=5), 400, "user", "string"),
    ("echo-string", "POST", C, with_(OK, echo="yes"), 400, "echo", "boolean"),
    ("chat-echo-unsupported", "POST", CHAT, with_(MSG, echo=True), 400, "echo", "not supported"),
    # vLLM's fields for what latent does not implement: refused, not ignored.
    ("use-beam-search", "POST", C, with_(OK, use_beam_search=True), 400, "use_beam_search",
     "not supported"),
    ("chat-bad-words", "POST", CHAT, with_(MSG, bad_words=["hi"]), 400, "bad_words",
     "not supported"),
    ("bad-words-string", "POST", C, with_(OK, bad_words="hi"), 400, "bad_words", "list"),
    ("priority", "POST", C, with_(OK, priority=3), 400, "priority", "not supported"),
    ("prompt-logprobs-streamed", "POST", C, with_(OK, stream=True, prompt_logprobs=1), 400,
     "prompt_logprobs", "stream"),
    ("prompt-logprobs-whole-vocabulary", "POST", CHAT, with_(MSG, prompt_logprobs=-1), 400,
     "prompt_logprobs", "[0, 20]"),
    ("truncate-prompt-tokens-zero", "POST", C, with_(OK, truncate_prompt_tokens=0), 400,
     "truncate_prompt_tokens", "positive"),
    ("truncate-prompt-tokens-past-the-room", "POST", C,
     with_(OK, truncate_prompt_tokens=CONTEXT), 400, "truncate_prompt_tokens", "leaves beside"),
    ("logit-bias-list", "POST", C, with_(OK, logit_bias=[1]), 400, "logit_bias", "an object"),
    ("logit-bias-key-not-an-id", "POST", C, with_(OK, logit_bias={"x1": 5}), 400, "logit_bias",
     "'x1' is not a token id"),
    ("logit-bias-key-float", "POST", C, with_(OK, logit_bias={"1.5": 5}), 400, "logit_bias",
     "not a token id"),
    # "05" beside "5" would be two keys for one id: only the canonical form is an id.
    ("logit-bias-key-leading-zero", "POST", C, with_(OK, logit_bias={"05": 5}), 400,
     "logit_bias", "'05' is not a token id"),
    ("logit-bias-out-of-vocab", "POST", C, with_(OK, logit_bias={"1000000": 5}), 400, "logit_bias",
     "token id 1000000 in 'logit_bias' is outside the vocabulary"),
    ("logit-bias-negative-id", "POST", C, with_(OK, logit_bias={"-1": 5}), 400, "logit_bias",
     "outside the vocabulary"),
    ("logit-bias-range", "POST", C, with_(OK, logit_bias={"1": 100.5}), 400, "logit_bias",
     "[-100, 100]"),
    ("logit-bias-value-string", "POST", C, with_(OK, logit_bias={"1": "5"}), 400, "logit_bias",
     "must be a number"),
    ("allowed-token-ids-empty", "POST", C, with_(OK, allowed_token_ids=[]), 400,
     "allowed_token_ids", "must not be empty"),
    ("allowed-token-ids-out-of-vocab", "POST", C, with_(OK, allowed_token_ids=[1, 1000000]), 400,
     "allowed_token_ids", "token id 1000000 in 'allowed_token_ids' is outside the vocabulary"),
    ("allowed-token-ids-strings", "POST", CHAT, with_(MSG, allowed_token_ids=["1"]), 400,
     "allowed_token_ids", "token ids"),
    ("allowed-token-ids-number", "POST", C, with_(OK, allowed_token_ids=5), 400,
     "allowed_token_ids", "a list"),
    ("best-of-unsupported", "POST", C, with_(OK, best_of=3), 400, "best_of", "not supported"),
    # The model.
    ("unknown-model", "POST", C, with_(OK, model="gpt-4"), 404, "model", "does not exist"),
    ("model-number", "POST", C, with_(OK, model=5), 400, "model", "string"),
    ("chat-unknown-model", "POST", CHAT, with_(MSG, model="nope"), 404, "model", "does not exist"),
    # The message names the model whole: not cut at a NUL.
    ("model-with-nul", "POST", C, with_(OK, model="ti\0ny"), 404, "model",
     "The model 'ti\0ny' does not exist"),
    # Chat.
    ("chat-no-messages", "POST", CHAT, with_(MSG, messages=...), 400, "messages", "required"),
    ("chat-empty-messages", "POST", CHAT, with_(MSG, messages=[]), 400, "messages", "empty"),
    ("chat-messages-string", "POST", CHAT, with_(MSG, messages="hi"), 400, "messages", "list"),
    ("chat-message-number", "POST", CHAT, with_(MSG, messages=[1]), 400, "messages[0]", "object"),
    ("chat-message-no-role", "POST", CHAT, with_(MSG, messages=[{"content": "hi"}]), 400,
     "messages[0].role", "role"),
    ("chat-image-part", "POST", CHAT,
     with_(MSG, messages=[{"role": "user",
                           "content": [{"type": "text", "text": "hi"},
                                       {"type": "image_url", "image_url": {"url": "x"}}]}]),
     400, "messages[0].content[1].type", "not supported"),
    ("chat-top-logprobs-without-logprobs", "POST", CHAT, with_(MSG, top_logprobs=5), 400,
     "top_logprobs", "logprobs"),
    ("chat-max-completion-tokens-zero", "POST", CHAT, with_(MSG, max_completion_tokens=0), 400,
     "max_completion_tokens", "at least 1"),
    ("chat-response-format-unknown", "POST", CHAT, with_(MSG, response_format={"type": "grammar"}), 400,
     "response_format", "not supported"),
    ("response-format-schema-missing", "POST", C, with_(OK, response_format={"type": "json_schema",
                                                                            "json_schema": {"name": "x"}}),
     400, "response_format", "needs a 'schema'"),
    ("response-format-unsupported-keyword", "POST", C,
     with_(OK, response_format={"type": "json_schema", "json_schema": {
         "name": "x", "schema": {"type": "array", "uniqueItems": True}}}),
     400, "response_format", "unsupported JSON schema keyword 'uniqueItems' at #"),
    ("chat-logprobs-number", "POST", CHAT, with_(MSG, logprobs=3), 400, "logprobs", "boolean"),
    # A chat's integers reach the template exact: past the 64-bit range, refused by place (not
    # turned into floats).
    ("chat-integer-past-64-bits", "POST", CHAT,
     with_(MSG, messages=[{"role": "user", "content": "hi", "x": [-9223372036854775809]}]), 400,
     "messages[0].x[0]", "integer -9223372036854775809 at messages[0].x[0] is too large"),
    ("chat-kwarg-integer-past-64-bits", "POST", CHAT,
     with_(MSG, chat_template_kwargs={"k": 2**64}), 400, "chat_template_kwargs.k",
     "integer 18446744073709551616 at chat_template_kwargs.k is too large (64-bit limit)"),
    ("tokenize-chat-integer-past-64-bits", "POST", "/tokenize",
     {"messages": [{"role": "user", "content": "hi", "n": 10**30}]}, 400, "messages[0].n",
     "too large (64-bit limit)"),
    # add_generation_prompt is a bool, top-level or among the template kwargs (where it wins, as
    # in vLLM).
    ("chat-add-generation-prompt-string", "POST", CHAT, with_(MSG, add_generation_prompt="yes"),
     400, "add_generation_prompt", "boolean"),
    # (The kwargs' one failed at render: param "messages", "the chat template failed ...".)
    ("chat-kwarg-add-generation-prompt-string", "POST", CHAT,
     with_(MSG, chat_template_kwargs={"add_generation_prompt": "yes"}), 400,
     "chat_template_kwargs.add_generation_prompt",
     "'chat_template_kwargs.add_generation_prompt' must be a boolean"),
    ("chat-kwarg-add-generation-prompt-continuing", "POST", CHAT,
     with_(MSG, continue_final_message=True, chat_template_kwargs={"add_generation_prompt": True}),
     400, "continue_final_message",
     "'continue_final_message' and 'add_generation_prompt' cannot both be true"),
    ("tokenize-kwarg-add-generation-prompt-string", "POST", "/tokenize",
     {"messages": MSG["messages"], "chat_template_kwargs": {"add_generation_prompt": 1}}, 400,
     "chat_template_kwargs.add_generation_prompt", "must be a boolean"),

    # Tokenizer endpoints.
    ("tokenize-nothing", "POST", "/tokenize", {}, 400, "prompt", "either"),
    ("tokenize-prompt-number", "POST", "/tokenize", {"prompt": 3}, 400, "prompt", "string"),
    ("detokenize-strings", "POST", "/detokenize", {"tokens": ["a"]}, 400, "tokens", "token ids"),
    ("detokenize-negative", "POST", "/detokenize", {"tokens": [-1]}, 400, "tokens", "outside the vocabulary"),
    # Routes and methods.
    ("get-on-post-route", "GET", C, None, 405, None, "not allowed"),
    ("unknown-route", "POST", "/v1/engines", OK, 404, None, "no route"),
    ("unknown-get", "GET", "/v2/models", None, 404, None, "no route"),
    ("unknown-model-id", "GET", "/v1/models/nope", None, 404, "model", "does not exist"),
]


def check_error(status: int, body: bytes, expected_status: int, param, words: str, case: str):
    assert status == expected_status, f"{case}: status {status}: {body[:300]!r}"
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}, case
    assert isinstance(error["message"], str) and words in error["message"], f"{case}: {error}"
    assert error["type"] == "invalid_request_error", case
    if param is not None:
        assert error["param"] == param, f"{case}: {error}"


def test_corpus_size():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_request(server, case):
    name, method, path, body, status, param, words = case
    got, data = server.request(method, path, body)
    check_error(got, data, status, param, words, name)


def test_add_generation_prompt_is_refused_alike_in_either_place(server):
    """Top-level or among the template kwargs (where it wins), a non-bool is invalid_type named by
    its place; the kwargs' one was a 400 naming "messages" with no code."""
    for body, param in [(with_(MSG, add_generation_prompt="yes"), "add_generation_prompt"),
                        (with_(MSG, chat_template_kwargs={"add_generation_prompt": "yes"}),
                         "chat_template_kwargs.add_generation_prompt")]:
        status, data = server.request("POST", CHAT, body)
        error = json.loads(data)["error"]
        assert (status, error["param"], error["code"]) == (400, param, "invalid_type"), error
        assert error["message"] == f"'{param}' must be a boolean", error


def test_server_still_serves(server):
    """After the whole corpus: healthy, serving, nothing leaked."""
    assert server.request("GET", "/health") == (200, b'{"status":"ok"}')
    status, out = server.post(C, OK)
    assert status == 200 and out["choices"][0]["finish_reason"] in ("stop", "length")
    m = server.metrics()
    assert m["latent_cache_blocks_used"] == 0 and m["latent_http_requests_in_flight"] == 0
    assert m.get('latent_http_responses_total{path="/v1/completions",status="400"}', 0) >= 40


def test_body_over_the_limit(server):
    """The test server allows 1 MiB bodies."""
    body = json.dumps({"prompt": "x" * (1 << 20)})
    status, data = server.request("POST", C, body)
    check_error(status, data, 413, None, "larger than the limit", "413")
    # Chunked transfer encoding is limited too.
    sock = socket.create_connection((HOST, server.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 65536
    try:
        for _ in range(20):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    except OSError:
        pass  # The server may answer and close before the rest is sent.
    reply = sock.recv(65536)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert server.request("GET", "/health")[0] == 200


def test_nul_in_a_header_value(server):
    """RFC 9110 5.5: a NUL in a field value is refused (400) before the body is read; the server
    goes on serving."""
    sock = socket.create_connection((HOST, server.port), timeout=30)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Note: a\x00b\r\n\r\n")
    reply = read_until(sock, b"\r\n\r\n")
    sock.close()
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert server.request("GET", "/health")[0] == 200


def test_post_without_length(server):
    sock = socket.create_connection((HOST, server.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
    # The headers and the body may come in separate segments: read until the body is there.
    reply = read_until(sock, b'"length_required"')
    sock.close()
    assert reply.startswith(b"HTTP/1.1 411"), reply[:200]
    assert b'"length_required"' in reply


def test_api_key(start_server):
    srv = start_server("--api-key", "sekret", "--block-tokens", "16", "--num-blocks", "64")
    good = {"Authorization": "Bearer sekret"}
    for headers, words in [({}, "missing API key"),
                           ({"Authorization": "Bearer wrong"}, "invalid API key"),
                           ({"Authorization": "Bearer sekret2"}, "invalid API key"),
                           ({"Authorization": "Basic c2VrcmV0"}, "missing API key"),
                           ({"Authorization": "sekret"}, "missing API key")]:
        for method, path, body in [("POST", C, OK), ("POST", CHAT, MSG), ("GET", "/v1/models", None),
                                   ("GET", f"/v1/models/{MODEL_NAME}", None),
                                   ("GET", "/v1/models/other", None),
                                   ("POST", "/tokenize", {"prompt": "hi"})]:
            status, data = srv.request(method, path, body, headers)
            check_error(status, data, 401, None, words, f"{path} {headers}")
            assert json.loads(data)["error"]["code"] == "invalid_api_key"
        # A HEAD's 401 is the GET's head alone, on the wire: http.client would read no body
        # after a HEAD whatever the server sent. A GET pipelined behind it must come next.
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
        ask = f" /v1/models/{MODEL_NAME} HTTP/1.1\r\nHost: x\r\n".encode() + lines + b"\r\n"
        last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        (get_head, get_body), health = split_responses(raw_exchange(srv.port, b"GET" + ask + last))
        assert get_head.startswith(b"HTTP/1.1 401 ") and get_body
        heads, rest = split_head_responses(raw_exchange(srv.port, b"HEAD" + ask + last), [401])
        assert heads == [get_head] and rest == b"".join(health), headers
    # The openai client sends the key as a bearer token.
    import openai

    with pytest.raises(openai.AuthenticationError):
        srv.client(api_key="wrong").completions.create(model=MODEL_NAME, prompt="hi", max_tokens=2)
    resp = srv.client(api_key="sekret").completions.create(model=MODEL_NAME, prompt="hi", max_tokens=2)
    assert resp.usage.completion_tokens >= 1
    assert srv.request("GET", "/v1/models", headers=good)[0] == 200
    assert srv.request("GET", f"/v1/models/{MODEL_NAME}", headers=good)[0] == 200
    # Health, metrics and the version stay open (load balancers, Prometheus), as in vLLM.
    for path in ("/health", "/ping", "/metrics", "/version"):
        assert srv.request("GET", path)[0] == 200, path


def test_api_key_help_names_the_routes_it_guards():
    # test_api_key's routes, and /detokenize beside /tokenize.
    import subprocess

    from e2e_harness import LATENT

    helped = " ".join(subprocess.run([str(LATENT), "serve", "--help"], capture_output=True,
                                     text=True, check=True).stdout.split())
    assert "Bearer KEY' on /v1/..., /tokenize and /detokenize" in helped


def check_cache_limit(srv, capacity: int, long_prompt: int, prompt: int, max_tokens: int,
                      label: str) -> None:
    """The server's cache limit is `capacity` tokens: a `long_prompt` is refused, so is `prompt`
    with `max_tokens`, and a chat with no max_tokens gets the room that is left, all of it."""
    status, data = srv.request("POST", C, with_(OK, prompt=[100] * long_prompt))
    check_error(status, data, 400, "prompt", f"cache holds only {capacity} tokens", label)
    status, data = srv.request("POST", C, with_(OK, prompt=[100] * prompt, max_tokens=max_tokens))
    check_error(status, data, 400, "max_tokens", f"cache holds {capacity} tokens", label)
    status, data = srv.request("POST", CHAT, with_(MSG, max_tokens=..., temperature=0,
                                                   ignore_eos=True))
    out = json.loads(data)
    assert status == 200, out
    assert out["usage"]["total_tokens"] == capacity
    assert out["choices"][0]["finish_reason"] == "length"


def test_prompt_longer_than_the_cache(start_server):
    """128 cache tokens, a longer context: a 200-token prompt fits the context, not the cache."""
    srv = start_server("--block-tokens", "16", "--num-blocks", "8")
    check_cache_limit(srv, 128, long_prompt=200, prompt=100, max_tokens=100, label="cache")


def test_sliding_window_cache_limit_is_what_the_engine_takes(start_server, tiny_models):
    """With sliding-window rows the cache holds back the blocks of two windows for a request
    (CacheManager::capacity_tokens): 8 blocks of 16 take 64 tokens, not 128. The server's limit
    (and so a chat's default max_tokens) is that figure, or the default would be refused."""
    model = tiny_models.get("dots3_note", "--tokenizer", str(TOKENIZER_DIR),
                            config={"max_position_embeddings": 512})  # window 16
    srv = start_server("--block-tokens", "16", "--num-blocks", "8", model=model)
    check_cache_limit(srv, 64, long_prompt=64, prompt=50, max_tokens=15, label="window cache")
    # A completion's default, 16, shrinks to the room left: 14 after a 50-token prompt.
    status, data = srv.request("POST", C, with_(OK, prompt=[100] * 50, max_tokens=...,
                                                temperature=0, ignore_eos=True))
    out = json.loads(data)
    assert status == 200, out
    assert out["usage"]["completion_tokens"] == 14
