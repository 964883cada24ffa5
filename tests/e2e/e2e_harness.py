"""The harness of the server's end-to-end tests: `build/latent serve` on a free loopback port with
a tiny model that carries the deepseek_v3 tokenizer, helpers to talk to it (raw HTTP, the official
`openai` client, /metrics), and pytest fixtures. Test modules import the fixtures they use
(`from e2e_harness import chat_model, server`); this is not a conftest.py, so that `from conftest
import ...` in the other test folders keeps meaning tests/conftest.py.

Everything binds 127.0.0.1, and every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import resource
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# LATENT_SERVE_BIN runs the tests against another build (a sanitizer build, say).
LATENT = Path(os.environ.get("LATENT_SERVE_BIN", REPO / "build" / "latent"))
# How many times slower that build starts and stops than the plain one (make test-asan and
# test-tsan set it: a sanitized server loads the 129k-entry tokenizer in 5x the CPU time). Only
# the harness's waits (start-up, SIGTERM, its clients' default timeouts) scale by it, never what a
# test asserts.
SLOWDOWN = float(os.environ.get("LATENT_TEST_SLOWDOWN", "1"))
# ../shared beside the repository (CI clones it there too).
TOKENIZER_DIR = REPO.parent / "shared" / "tokenizers" / "deepseek_v3"
HOST = "127.0.0.1"
MODEL_NAME = "tiny"
# The test model's context: long enough that a request can outlast a slow (starved) client.
CONTEXT = 4096

# The engine flags of the shared test server: small blocks so prompts span several (prefix
# hits), room for 64 concurrent requests (or 8 of CONTEXT tokens) without preemption, and block
# accounting checked after every step.
SERVER_FLAGS = ("--block-tokens", "16", "--num-blocks", "2048", "--max-batch-tokens", "512",
                "--max-request-mib", "1", "--check-invariants")


class LatentServer:
    """One `latent serve` process; its stderr goes to a log file."""

    def __init__(self, model_dir: Path, log_path: Path, *flags: str, name: str = MODEL_NAME,
                 env: dict[str, str] | None = None, file_limit: int | None = None):
        """env: variables set for the server on top of this process's environment. file_limit:
        its open-file limit, soft and hard (so that the server cannot raise it)."""
        if not LATENT.exists():
            raise RuntimeError(f"{LATENT} is missing: run `make build` first")
        self.log_path = log_path
        self.name = name
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [str(LATENT), "serve", "--model", str(model_dir), "--host", HOST, "--port", "0",
             "--served-model-name", name, *flags],
            stdout=subprocess.DEVNULL, stderr=self._log,
            env=None if env is None else {**os.environ, **env},
            preexec_fn=None if file_limit is None else lambda: set_file_limit(file_limit))
        self.port = self._wait_for_port(timeout=30 * SLOWDOWN)
        self.wait_ready(timeout=60 * SLOWDOWN)

    # -- life cycle --

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _wait_for_port(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise AssertionError(f"latent serve exited ({self.proc.returncode}):\n{self.log()}")
            time.sleep(0.02)
        self.kill()
        raise AssertionError(f"latent serve did not report its port:\n{self.log()}")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                status, _ = self.request("GET", "/health", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"latent serve exited ({self.proc.returncode}):\n{self.log()}")
            time.sleep(0.05)
        self.kill()
        raise AssertionError(f"/health never answered 200:\n{self.log()}")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.close()

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM and wait; kills it (and fails) when it does not exit in time."""
        timeout *= SLOWDOWN
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"latent serve ignored SIGTERM for {timeout} s:\n{self.log()}")
        self._log.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._log.close()

    # -- talking to it --

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def client(self, api_key: str = "unused", **kwargs):
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0,
                             timeout=kwargs.pop("timeout", 120 * SLOWDOWN), **kwargs)

    def request(self, method: str, path: str, body=None, headers: dict | None = None,
                timeout: float | None = None) -> tuple[int, bytes]:
        """One request on a fresh connection; `body` is bytes, str, or JSON-able. The default
        timeout (60 s) scales with SLOWDOWN; one a test passes does not."""
        if timeout is None:
            timeout = 60 * SLOWDOWN
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            if body is not None and not isinstance(body, (bytes, str)):
                body = json.dumps(body)
            if isinstance(body, str):
                body = body.encode()
            all_headers = {"Content-Type": "application/json"} if body is not None else {}
            all_headers.update(headers or {})
            conn.request(method, path, body=body, headers=all_headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def post(self, path: str, body, headers: dict | None = None, timeout: float | None = None):
        """POSTs JSON; returns (status, parsed JSON)."""
        status, data = self.request("POST", path, body, headers, timeout)
        return status, json.loads(data)

    def metrics(self) -> dict[str, float]:
        """/metrics as {name or name{labels}: value}, without the model_name label."""
        status, data = self.request("GET", "/metrics")
        assert status == 200
        return parse_metrics(data.decode())


def set_file_limit(limit: int) -> None:
    """Sets this process's open-file limit, soft and hard (a child's, in preexec_fn)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def parse_metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        assert m, f"not a Prometheus sample line: {line!r}"
        name, labels, value = m.groups()
        labels = ",".join(l for l in (labels or "").split(",") if l and not l.startswith("model_name="))
        out[f"{name}{{{labels}}}" if labels else name] = float(value)
    return out


def sse_events(raw: bytes) -> list[str]:
    """The `data:` payloads of an SSE body (comment lines skipped)."""
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                events.append(line[len("data: "):])
    return events


def wait_until(predicate, timeout: float, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{message} not reached within {timeout} s")


def open_stream(port: int, path: str, body: dict, timeout: float = 30) -> socket.socket:
    """Sends a POST on a raw socket and returns it, for tests that read part of a stream."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection((HOST, port), timeout=timeout)
    sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: localhost\r\n"
                 b"Content-Type: application/json\r\nContent-Length: " + str(len(payload)).encode() +
                 b"\r\n\r\n" + payload)
    return sock


def read_until(sock: socket.socket, marker: bytes, limit: int = 1 << 20) -> bytes:
    data = b""
    while marker not in data and len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def raw_exchange(port: int, requests: bytes, timeout: float = 60) -> bytes:
    """Sends pipelined `requests` on one connection, the last with "Connection: close", and
    returns every byte the server sends until it closes: what http.client hides (it reads no
    body after a HEAD whatever the server sends)."""
    sock = socket.create_connection((HOST, port), timeout=timeout * SLOWDOWN)
    try:
        sock.sendall(requests)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data
    finally:
        sock.close()


def split_responses(data: bytes) -> list[tuple[bytes, bytes]]:
    """Pipelined responses framed by Content-Length, as (head with its blank line, body)."""
    out = []
    while data:
        head, sep, data = data.partition(b"\r\n\r\n")
        assert sep, f"no end of head in {head[:300]!r}"
        length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head + b"\r\n")
        assert length, head
        size = int(length.group(1))
        out.append((head + sep, data[:size]))
        data = data[size:]
    return out


def split_head_responses(data: bytes, statuses: list[int]) -> tuple[list[bytes], bytes]:
    """The bytes answering len(statuses) pipelined HEADs and then one more request: each HEAD's
    response must be its head alone, with the status given, the next response right behind it (a
    body there would be read as the next response). Returns the heads and what follows them."""
    heads = []
    for status in statuses:
        head, sep, data = data.partition(b"\r\n\r\n")
        assert sep and head.startswith(f"HTTP/1.1 {status} ".encode()), (status, head[:300])
        heads.append(head + sep)
    return heads, data


# -- fixtures --

@pytest.fixture(scope="session")
def chat_model(tiny_models) -> Path:
    """A tiny random DeepSeek V3 with the real deepseek_v3 tokenizer and chat template, and a
    context of CONTEXT tokens."""
    assert TOKENIZER_DIR.is_dir(), f"{TOKENIZER_DIR} is missing (../shared sits beside the repository)"
    # YaRN's factor 4 over the preset's original 128 positions, scaled up to CONTEXT.
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": CONTEXT // 4,
            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
            "rope_theta": 10000.0}
    return tiny_models.get("deepseek_v3", "--tokenizer", str(TOKENIZER_DIR),
                           config={"max_position_embeddings": CONTEXT, "rope_parameters": rope})


@pytest.fixture(scope="module")
def server(chat_model, tmp_path_factory):
    """The shared test server of a test module."""
    srv = LatentServer(chat_model, tmp_path_factory.mktemp("serve") / "serve.log", *SERVER_FLAGS)
    yield srv
    returncode = srv.stop()
    assert returncode == 0, f"latent serve exited {returncode}:\n{srv.log()}"


@pytest.fixture
def start_server(chat_model, tmp_path):
    """Starts extra servers with other flags; stops them after the test."""
    servers = []

    def start(*flags: str, model: Path | None = None) -> LatentServer:
        srv = LatentServer(model or chat_model, tmp_path / f"serve{len(servers)}.log", *flags)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        if srv.proc.poll() is None:
            srv.stop()
