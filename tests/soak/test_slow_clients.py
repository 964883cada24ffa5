"""100 stalled clients (each sent half a request: half of them stop inside the headers, half inside
the body) and 50 idle keep-alive connections, against a server with 2 worker threads: the stalled
ones hold no engine slot and no thread, other clients are served at once meanwhile, and each
stalled client gets 408 and is disconnected once the header/body timeout passes, not before.

About 10 s. Run alone: .venv/bin/python -m pytest -q -s tests/soak/test_slow_clients.py
"""

from __future__ import annotations

import asyncio
import socket
import time

from load_clients import IdleConnection, request_bytes, stream_completion, timed_exchange

from e2e_harness import HOST, LatentServer

STALLED = 100
IDLE = 50
OTHERS = 20
TIMEOUT_S = 4.0
FLAGS = ("--block-tokens", "16", "--num-blocks", "512", "--http-threads", "2",
         "--header-timeout", str(TIMEOUT_S), "--body-timeout", str(TIMEOUT_S),
         "--keep-alive-timeout", "60")
HALF_HEADERS = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le"
HALF_BODY = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 200\r\n\r\n{\"prompt\": [1, 2")


async def others(port: int):
    idle = await asyncio.gather(*(IdleConnection().open(port) for _ in range(IDLE)))
    results = await asyncio.gather(*(stream_completion(
        port, {"prompt": [5 + i, 6, 7], "max_tokens": 8, "temperature": 0, "ignore_eos": True,
               "stream": True, "stream_options": {"include_usage": True},
               "return_token_ids": True}) for i in range(OTHERS)))
    for conn in idle:
        await conn.health()
        conn.close()
    return results


def test_stalled_clients_are_dropped_and_block_nobody(tiny_models, tmp_path):
    srv = LatentServer(tiny_models.get("deepseek_v3"), tmp_path / "serve.log", *FLAGS)
    try:
        socks = []
        for i in range(STALLED):
            sock = socket.create_connection((HOST, srv.port), timeout=30)
            sock.sendall(HALF_HEADERS if i % 2 else HALF_BODY)
            socks.append((sock, time.monotonic()))

        # No engine slot, nothing in flight.
        m = srv.metrics()
        assert m["latent_num_requests_running"] == 0 and m["latent_num_requests_waiting"] == 0
        assert m["latent_http_requests_in_flight"] == 0 and m["latent_cache_blocks_used"] == 0

        # Everyone else is served at once.
        seconds, answer = timed_exchange(srv.port, request_bytes("GET", "/health"))
        assert answer.startswith(b"HTTP/1.1 200") and seconds < 1.0, (seconds, answer[:100])
        results = asyncio.run(others(srv.port))
        for r in results:
            assert r.done and not r.error and len(r.token_ids) == 8, r
            assert r.head_at - r.started < 1.0, r.head_at - r.started
        served_by = time.monotonic() - socks[-1][1]
        # The others were done before the stalled clients timed out: they did not wait for them.
        assert served_by < TIMEOUT_S, f"the other clients took {served_by:.2f} s"

        # Each stalled client is answered 408 and disconnected after the timeout.
        dropped_after = []
        for sock, sent in socks:
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            dropped_after.append(time.monotonic() - sent)
            assert data.startswith(b"HTTP/1.1 408"), data[:200]
            assert b"request_timeout" in data
            sock.close()
        assert min(dropped_after) >= TIMEOUT_S - 0.05, min(dropped_after)
        assert max(dropped_after) < TIMEOUT_S + 3, max(dropped_after)
        print(f"\n{STALLED} stalled clients dropped {min(dropped_after):.2f}-"
              f"{max(dropped_after):.2f} s after their half request (timeout {TIMEOUT_S} s); "
              f"{OTHERS} streams and {IDLE} idle connections served meanwhile in {served_by:.2f} s")
        after = srv.metrics()
        assert after["latent_cache_blocks_used"] == 0 and after["latent_http_requests_in_flight"] == 0
        timeouts = sum(v for k, v in after.items()
                       if k.startswith("latent_http_responses_total") and 'status="408"' in k)
        assert timeouts == STALLED, after
    finally:
        returncode = srv.stop()
    assert returncode == 0, srv.log()
