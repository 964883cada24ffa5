"""Clients for the HTTP load tests: asyncio streaming clients that read the chunked SSE response
byte-exactly (so a malformed chunk or event fails the test) and time every token, idle
keep-alive connections, and blocking probes (/health, garbage) timed from another thread.

Plain asyncio sockets, no client library: 1,000 of them fit in one Python process on 2 cores,
and the framing is checked rather than forgiven."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from e2e_harness import HOST  # noqa: E402


@dataclass
class StreamResult:
    status: int = 0
    started: float = 0.0  # Before connecting.
    head_at: float = 0.0  # The response head arrived.
    token_times: list[float] = field(default_factory=list)  # Each chunk that carried tokens.
    token_ids: list[int] = field(default_factory=list)
    usage: dict | None = None
    done: bool = False  # "data: [DONE]" was the last event.
    error: str = ""

    def ttft(self) -> float:
        return self.token_times[0] - self.started

    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]


def request_bytes(method: str, path: str, body: bytes | None = None,
                  headers: dict | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict, bytes]:
    """One non-chunked response: (status, headers, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def stream_completion(port: int, body: dict, on_head=None) -> StreamResult:
    """POSTs a streaming completion and reads it to the end, checking the chunked framing."""
    r = StreamResult(started=time.monotonic())
    writer = None
    try:
        reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 20)
        writer.write(request_bytes("POST", "/v1/completions", json.dumps(body).encode()))
        head = await reader.readuntil(b"\r\n\r\n")
        r.head_at = time.monotonic()
        if on_head:
            on_head()
        r.status = int(head.split(b" ", 2)[1])
        if r.status != 200:
            r.error = head.decode("latin-1")
            return r
        assert b"transfer-encoding: chunked" in head.lower(), head
        pending = b""
        events: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                assert await reader.readexactly(2) == b"\r\n"
                break
            data = await reader.readexactly(size + 2)
            assert data.endswith(b"\r\n"), data[-10:]
            now = time.monotonic()
            pending += data[:-2]
            while b"\n\n" in pending:
                block, pending = pending.split(b"\n\n", 1)
                for line in block.split(b"\n"):
                    if not line.startswith(b"data: "):
                        assert line.startswith(b":"), line  # Only comments besides data.
                        continue
                    payload = line[len(b"data: "):]
                    events.append(payload)
                    if payload == b"[DONE]":
                        continue
                    event = json.loads(payload)
                    assert "error" not in event, event
                    if event.get("usage"):
                        r.usage = event["usage"]
                    ids = [t for c in event.get("choices", []) for t in c.get("token_ids") or []]
                    if ids:
                        r.token_ids += ids
                        r.token_times.append(now)
        assert pending == b"", pending
        r.done = bool(events) and events[-1] == b"[DONE]" and events.count(b"[DONE]") == 1
    except Exception as e:  # Reported by the test, with the others.
        r.error = repr(e)
    finally:
        if writer is not None:
            writer.close()
    return r


class IdleConnection:
    """A keep-alive connection that served one /health and then sits idle."""

    async def open(self, port: int) -> "IdleConnection":
        self.reader, self.writer = await asyncio.open_connection(HOST, port)
        return await self.health()

    async def health(self) -> "IdleConnection":
        self.writer.write(request_bytes("GET", "/health"))
        status, _, body = await read_response(self.reader)
        assert status == 200 and body == b'{"status":"ok"}', (status, body)
        return self

    def close(self) -> None:
        self.writer.close()


def timed_exchange(port: int, data: bytes, timeout: float = 10) -> tuple[float, bytes]:
    """Sends `data` on a fresh blocking connection; returns (seconds to the first byte of the
    answer, the answer read until the server closes or `timeout`)."""
    start = time.monotonic()
    sock = socket.create_connection((HOST, port), timeout=timeout)
    try:
        try:
            sock.sendall(data)
        except OSError:
            pass  # The server may answer and close before all of the garbage is sent.
        first = sock.recv(65536)
        elapsed = time.monotonic() - start
        answer = first
        sock.settimeout(0.5)
        try:
            while b"\r\n\r\n" not in answer or len(answer) < 64:
                more = sock.recv(65536)
                if not more:
                    break
                answer += more
        except OSError:
            pass
        return elapsed, answer
    finally:
        sock.close()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def summary_ms(values: list[float]) -> str:
    return (f"p50 {percentile(values, 50) * 1e3:.1f} ms, p99 {percentile(values, 99) * 1e3:.1f} ms,"
            f" mean {statistics.fmean(values) * 1e3:.1f} ms (n={len(values)})")
