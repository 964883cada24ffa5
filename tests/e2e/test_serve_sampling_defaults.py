"""generation_config.json's sampling fields over the OpenAI API: as `vllm serve`'s default
--generation-config auto (default_sampling_params), temperature, top_p, top_k, min_p and
repetition_penalty fill the fields a request leaves out, and max_new_tokens caps a chat
completion's default max_tokens (a completion's stays 16); a field the file gets wrong stops the
server at start-up, naming it. The server ignored them. On copies of the committed demo model.
A few seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import demo_with
from e2e_harness import MODEL_NAME, REPO, LatentServer

DEMO = REPO / "models" / "demo"
CHAT = "/v1/chat/completions"
FLAGS = ("--block-tokens", "16", "--check-invariants")
MESSAGES = [{"role": "user", "content": "What say you?"}]



@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(model: Path) -> LatentServer:
        srv = LatentServer(model, tmp_path / f"serve{len(servers)}.log", *FLAGS)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        if srv.proc.poll() is None:
            assert srv.stop() == 0, srv.log()


def ids(srv: LatentServer, path: str = CHAT, **fields) -> tuple[list[int], str]:
    body = {"model": MODEL_NAME, "ignore_eos": True, "return_token_ids": True, **fields}
    body.update({"messages": MESSAGES} if path == CHAT else {"prompt": "ROMEO."})
    status, out = srv.post(path, body)
    assert status == 200, out
    choice = out["choices"][0]
    return choice["token_ids"], choice["finish_reason"]


def test_the_files_sampling_fields_fill_what_a_request_leaves_out(serve, tmp_path):
    # top_k 1: every draw is the most likely token, whatever the temperature or seed.
    srv = serve(demo_with(tmp_path, temperature=0.7, top_k=1, top_p=0.9, max_new_tokens=5))
    assert "sampling defaults from generation_config.json" in srv.log()
    greedy, finish = ids(srv, temperature=0, max_tokens=5)
    assert len(greedy) == 5 and finish == "length"
    for seed in (1, 2, 3):  # no max_tokens: max_new_tokens; no top_k: the file's 1
        assert ids(srv, seed=seed) == (greedy, "length")
    assert ids(srv, seed=1, top_k=None) == (greedy, "length")  # null is left out too
    # A request's own values win.
    assert len(ids(srv, max_tokens=8, temperature=0)[0]) == 8
    sampled = {tuple(ids(srv, seed=seed, top_k=0, temperature=1.0, top_p=1.0)[0])
               for seed in range(6)}
    assert len(sampled) > 1
    # A completion's default max_tokens stays 16, as vLLM's CompletionRequest's.
    assert len(ids(srv, "/v1/completions")[0]) == 16


def test_a_completions_null_max_tokens_is_vllms_none(serve, tmp_path):
    """"max_tokens": null is None to vLLM's get_max_tokens: the file's max_new_tokens, else the
    room the context leaves; only a completion that leaves the field out gets 16. latent gave
    null the 16 too."""
    srv = serve(demo_with(tmp_path, max_new_tokens=20))
    assert len(ids(srv, "/v1/completions", max_tokens=None)[0]) == 20
    assert len(ids(srv, "/v1/completions")[0]) == 16
    srv = serve(DEMO)  # no max_new_tokens: to the context's end (1024 tokens)
    status, out = srv.post("/v1/completions", {"model": MODEL_NAME, "prompt": "ROMEO.",
                                               "ignore_eos": True, "max_tokens": None})
    assert status == 200, out
    assert out["usage"]["completion_tokens"] == 1024 - out["usage"]["prompt_tokens"]
    assert out["choices"][0]["finish_reason"] == "length"


def test_top_k_minus_one_is_off(serve, tmp_path):
    """vLLM's spelling of off, which request lines refused in the file (they know only 0)."""
    srv = serve(demo_with(tmp_path, top_k=-1, temperature=0))
    greedy, _ = ids(srv, max_tokens=4)
    assert ids(srv, max_tokens=4, top_k=0) == (greedy, "length")


@pytest.mark.parametrize("fields, message", [
    (dict(top_p=1.5), "generation_config.json: top_p must be in \\(0, 1\\], got 1.5"),
    (dict(temperature="hot"), "generation_config.json: temperature must be a number, got \"hot\""),
    (dict(max_new_tokens=0), "generation_config.json: max_new_tokens must be at least 1, got 0"),
])
@pytest.mark.parametrize("weights", [True, False])
def test_a_bad_sampling_field_stops_the_server_at_start_up(serve, tmp_path, fields, message,
                                                           weights):
    """Checked before the weights are read: with weights that do not load, the file's field is
    still what the error names (the server read every weight first)."""
    with pytest.raises(AssertionError, match=message):
        serve(demo_with(tmp_path, weights=weights, **fields))
