"""HTTP framing a client controls: many pipelined requests on one connection (answered in order,
without the server's stack growing per request), an HTTP/1.0 client's stream (no chunked
encoding, which HTTP/1.0 does not know: the close ends it), and a chunked body whose pause
between chunks is under the body timeout but over the header timeout."""

from __future__ import annotations

import json
import socket
import threading
import time

from e2e_harness import (HOST, MODEL_NAME, chat_model, server, sse_events,  # noqa: F401
                         start_server)

C = "/v1/completions"
HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def read_all(sock: socket.socket, limit: int = 64 << 20) -> bytes:
    data = b""
    while len(data) < limit:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return data


def test_thousands_of_pipelined_requests_are_answered_in_order(server):
    # Each reply used to handle the next pipelined request one call deeper: ~9,000 of them
    # overflowed the event loop's stack and killed the server for every client.
    count = 20000
    sock = socket.create_connection((HOST, server.port), timeout=120)
    received = bytearray()

    def read():
        while received.count(b"HTTP/1.1 ") < count:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    sock.sendall(HEALTH * (count - 1) + HEALTH.replace(b"Host: x", b"Host: x\r\nConnection: close"))
    reader.join(timeout=120)
    sock.close()
    assert not reader.is_alive()
    assert received.count(b"HTTP/1.1 200 OK") == count
    assert received.count(b'{"status":"ok"}') == count
    assert server.proc.poll() is None, server.log()
    assert server.request("GET", "/health") == (200, b'{"status":"ok"}')


def test_an_http_1_0_stream_is_not_chunked(server):
    body = json.dumps({"model": MODEL_NAME, "prompt": "hi", "max_tokens": 4, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    sock = socket.create_connection((HOST, server.port), timeout=60)
    sock.sendall(b"POST " + C.encode() + b" HTTP/1.0\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    raw = read_all(sock)  # the server closes the connection to end the stream
    sock.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"transfer-encoding" not in head.lower() and b"Connection: close" in head
    events = sse_events(payload)
    assert events[-1] == "[DONE]"
    tokens = [json.loads(e)["choices"][0]["text"] for e in events[:-1]]
    # The same text as the same request over HTTP/1.1 without streaming.
    status, out = server.post(C, {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 4,
                                  "temperature": 0, "ignore_eos": True})
    assert status == 200 and "".join(tokens) == out["choices"][0]["text"]


def test_a_pause_between_chunks_gets_the_body_timeout(start_server):
    srv = start_server("--block-tokens", "16", "--num-blocks", "64", "--header-timeout", "1",
                       "--body-timeout", "30")
    body = json.dumps({"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2}).encode()
    half = len(body) // 2
    sock = socket.create_connection((HOST, srv.port), timeout=60)
    sock.sendall(b"POST " + C.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (half, body[:half]))
    time.sleep(2.5)  # past the header timeout, in the chunk-size phase
    sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body) - half, body[half:]))
    reply = read_all(sock)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
    # Headers that do not finish in time still get 408.
    sock = socket.create_connection((HOST, srv.port), timeout=60)
    sock.sendall(b"POST " + C.encode() + b" HTTP/1.1\r\nHost: x\r\n")
    reply = read_all(sock)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 408"), reply[:300]
