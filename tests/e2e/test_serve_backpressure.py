"""Back-pressure and connection limits: past --max-waiting requests queued for the engine, a new
generation request gets 503 with Retry-After at once (not a hang), while /health and /metrics
still answer at once; past --max-connections, a new connection gets 503 and is closed; a client
that goes away while its request is queued or running is cancelled at once."""

from __future__ import annotations

import http.client
import json
import socket
import time

from e2e_harness import (HOST, MODEL_NAME, chat_model, open_stream, read_until,  # noqa: F401
                         start_server, wait_until)

FLAGS = ("--block-tokens", "16", "--num-blocks", "512")
LONG = {"model": MODEL_NAME, "prompt": "Go on", "max_tokens": 3000, "temperature": 0,
        "ignore_eos": True, "stream": True}


def timed_get(port: int, path: str) -> tuple[float, int]:
    start = time.monotonic()
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return time.monotonic() - start, resp.status


def test_max_waiting_gives_503_with_retry_after(start_server):
    srv = start_server(*FLAGS, "--max-seqs", "1", "--max-waiting", "2")
    running = open_stream(srv.port, "/v1/completions", LONG)
    assert b'"text"' in read_until(running, b'"text"')
    # One sequence at a time: these two wait behind it.
    queued = [open_stream(srv.port, "/v1/completions", {**LONG, "prompt": f"Wait {i}"})
              for i in range(2)]
    wait_until(lambda: srv.metrics()["latent_num_requests_waiting"] == 2, timeout=20,
               message="two requests waiting")

    start = time.monotonic()
    conn = http.client.HTTPConnection(HOST, srv.port, timeout=10)
    conn.request("POST", "/v1/completions", json.dumps({**LONG, "prompt": "One more"}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    elapsed = time.monotonic() - start
    conn.close()
    assert resp.status == 503, body
    assert resp.getheader("Retry-After") == "1"
    assert body["error"]["code"] == "server_overloaded" and "--max-waiting" in body["error"]["message"]
    assert elapsed < 1.0, elapsed
    # /health and /metrics answer at once while the engine is busy.
    for path in ("/health", "/metrics"):
        times = []
        for _ in range(5):
            seconds, status = timed_get(srv.port, path)
            assert status == 200
            times.append(seconds)
        assert sorted(times)[2] < 0.5, (path, times)

    # Clients that leave are cancelled at once, queued or running; then there is room again.
    for sock in [running, *queued]:
        sock.close()
    wait_until(lambda: (lambda m: m["latent_num_requests_running"] == 0 and
                        m["latent_num_requests_waiting"] == 0 and
                        m["latent_cache_blocks_used"] == 0 and
                        m["latent_http_requests_in_flight"] == 0)(srv.metrics()),
               timeout=10, message="idle again")
    status, out = srv.post("/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2})
    assert status == 200, out


def test_max_connections(start_server):
    srv = start_server(*FLAGS, "--max-connections", "4")
    held = [socket.create_connection((HOST, srv.port), timeout=10) for _ in range(4)]
    time.sleep(0.2)  # Accepted by the server.
    extra = socket.create_connection((HOST, srv.port), timeout=10)
    data = read_until(extra, b"}}")
    assert data.startswith(b"HTTP/1.1 503"), data[:200]
    assert b"too_many_connections" in data and b"Retry-After: 1" in data
    assert extra.recv(100) == b""  # Closed.
    extra.close()
    # A held connection is served; once they are gone, new ones are too.
    held[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_until(held[0], b"}").startswith(b"HTTP/1.1 200")
    for sock in held:
        sock.close()
    wait_until(lambda: srv.request("GET", "/health")[0] == 200, timeout=5, message="served")
