"""`latent serve` under an open-file limit below --max-connections (every connection is a
descriptor): one warning at start names both numbers, the connection limit is lowered to what fits,
and connections past it get 503 and are closed at once, not left unanswered in the listen queue.
Where descriptors run out anyway, a new connection still gets 503 (through the server's spare
descriptor), the condition is logged once, not once per retry, and the server serves as before
once descriptors are free again. A limit with no room for a single connection is refused."""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import time
from pathlib import Path

from e2e_harness import (HOST, LATENT, MODEL_NAME, SLOWDOWN, LatentServer,  # noqa: F401
                         chat_model, read_until, set_file_limit, wait_until)

FLAGS = ("--block-tokens", "16", "--num-blocks", "64")
# Hard and soft: the server cannot raise it. Room for about 90 connections.
FILE_LIMIT = 160
HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def refused(sock: socket.socket) -> bytes:
    """The 503 a refused connection gets before its close (it sends nothing itself)."""
    data = read_until(sock, b"}}")
    assert data.startswith(b"HTTP/1.1 503"), data[:300]
    assert b"too_many_connections" in data and b"Retry-After: 1" in data, data
    assert sock.recv(100) == b"", "not closed"
    sock.close()
    return data


def server_sockets(pid: int) -> int:
    fd_dir = Path(f"/proc/{pid}/fd")
    count = 0
    for entry in fd_dir.iterdir():
        try:
            count += os.readlink(entry).startswith("socket:")
        except FileNotFoundError:  # Closed while listed.
            pass
    return count


def lowest_free_descriptor(pid: int) -> int:
    """The number the server's next descriptor would get (the lowest one not open)."""
    open_fds = {int(name) for name in os.listdir(f"/proc/{pid}/fd")}
    return min(set(range(len(open_fds) + 1)) - open_fds)


def test_connections_fit_the_file_limit(chat_model, tmp_path):
    srv = LatentServer(chat_model, tmp_path / "serve.log", *FLAGS, file_limit=FILE_LIMIT)
    try:
        warning = re.search(r"warning: the open-file limit \(160\) leaves room for (\d+) "
                            r"connections .* fewer than --max-connections 4096: serving at most "
                            r"(\d+) connections", srv.log())
        assert warning, srv.log()
        room = int(warning.group(1))
        assert room == int(warning.group(2)) and 0 < room <= FILE_LIMIT - 64, warning.group(0)
        assert srv.log().count("open-file limit") == 1

        # Every slot taken: the ones past them get 503 and the close at once (accepted in order).
        wait_until(lambda: server_sockets(srv.proc.pid) == 1, timeout=30 * SLOWDOWN,
                   message="the start-up checks' connections closed")
        held = [socket.create_connection((HOST, srv.port), timeout=30) for _ in range(room)]
        extra = [socket.create_connection((HOST, srv.port), timeout=30) for _ in range(3)]
        for sock in extra:
            assert f"the limit is {room}".encode() in refused(sock)
        for sock in held:  # Real connections, served.
            sock.sendall(HEALTH)
            assert read_until(sock, b"}").startswith(b"HTTP/1.1 200")
        for sock in held:
            sock.close()
        wait_until(lambda: server_sockets(srv.proc.pid) == 1, timeout=30 * SLOWDOWN,
                   message="only the listening socket open")

        # Descriptors gone for another reason: the soft limit lowered to the next free number.
        pid = srv.proc.pid
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest_free_descriptor(pid), FILE_LIMIT))
        for _ in range(4):
            sock = socket.create_connection((HOST, srv.port), timeout=30)
            assert b"out of file descriptors" in refused(sock)
            time.sleep(0.15)  # Sweeps go by (the old loop logged on each); nothing is timed.
        assert srv.log().count("cannot accept a connection") == 1, srv.log()
        assert "Too many open files" in srv.log()

        # Descriptors back: served as before, generation included.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))
        assert srv.request("GET", "/health")[0] == 200
        status, out = srv.post("/v1/completions",
                               {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2})
        assert status == 200, out
        assert srv.log().count("cannot accept a connection") == 1, srv.log()
    finally:
        returncode = srv.stop()
    assert returncode == 0, srv.log()


def test_no_room_for_a_connection(chat_model):
    result = subprocess.run(
        [str(LATENT), "serve", "--model", str(chat_model), "--host", HOST, "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60 * SLOWDOWN,
        preexec_fn=lambda: set_file_limit(40))
    assert result.returncode != 0
    assert b"the open-file limit (40) leaves no descriptor for a connection" in result.stderr, \
        result.stderr
    assert b"listening on" not in result.stderr
