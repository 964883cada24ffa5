"""Clients that go away mid-stream cancel their requests: the engine stops generating for them and
their cache blocks come back (cache usage on /metrics returns to its idle value); the server keeps
serving everyone else."""

from __future__ import annotations

from e2e_harness import (CONTEXT, MODEL_NAME, chat_model, open_stream, read_until,  # noqa: F401
                         server, wait_until)

STREAMS = 8
# Thousands of steps: the requests are still running when even a starved client gets to close
# its sockets, and far more than the tokens generated before the disconnect is noticed.
MAX_TOKENS = CONTEXT - 96


def test_disconnect_mid_stream_frees_blocks(server):
    idle = server.metrics()
    assert idle["latent_cache_blocks_used"] == 0
    socks = []
    for i in range(STREAMS):
        body = {"model": MODEL_NAME, "prompt": f"Stream {i} " + "and more " * (3 * i + 1),
                "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "stream": True}
        socks.append(open_stream(server.port, "/v1/completions", body))
    # Every stream is under way: two tokens' chunks arrived.
    for sock in socks:
        data = read_until(sock, b'"text"')
        data += read_until(sock, b'"text"')
        assert b"200 OK" in data and data.count(b'"text"') >= 2, data[:300]
    busy = server.metrics()
    assert busy["latent_cache_blocks_used"] > 0, f"the streams are not running: {busy}\n{server.log()}"
    for sock in socks:
        sock.close()

    after = wait_until(lambda: (lambda m: m if m["latent_cache_blocks_used"] == 0 and
                                m["latent_num_requests_running"] == 0 and
                                m["latent_http_requests_in_flight"] == 0 else None)(server.metrics()),
                       timeout=20, message="cache usage back to idle")
    assert after["latent_cache_usage_ratio"] == idle["latent_cache_usage_ratio"] == 0
    assert after["latent_num_requests_waiting"] == 0
    generated = after["latent_generation_tokens_total"] - idle["latent_generation_tokens_total"]
    assert generated < STREAMS * MAX_TOKENS / 2, "the requests ran on after their clients left"
    aborted = (after['latent_request_success_total{finished_reason="abort"}'] -
               idle.get('latent_request_success_total{finished_reason="abort"}', 0))
    assert aborted == STREAMS, f"{after}\n{server.log()}"

    # The server still serves.
    resp = server.client().completions.create(model=MODEL_NAME, prompt="still there?", max_tokens=3,
                                              temperature=0)
    assert resp.choices[0].finish_reason in ("length", "stop")
    assert server.metrics()["latent_cache_blocks_used"] == 0


def test_disconnect_before_first_token(server):
    """A client gone while its request waits behind others is cancelled too."""
    idle = server.metrics()
    socks = [open_stream(server.port, "/v1/completions",
                         {"prompt": f"Queued {i}", "max_tokens": MAX_TOKENS, "temperature": 0,
                          "ignore_eos": True, "stream": True}) for i in range(4)]
    for sock in socks:
        sock.close()
    wait_until(lambda: (lambda m: m["latent_cache_blocks_used"] == 0 and
                        m["latent_http_requests_in_flight"] == 0)(server.metrics()),
               timeout=20, message="cache usage back to idle")
    after = server.metrics()
    assert (after["latent_generation_tokens_total"] - idle["latent_generation_tokens_total"]
            < 4 * MAX_TOKENS / 2)
