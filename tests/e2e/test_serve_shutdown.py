"""SIGINT / SIGTERM: the server stops accepting connections, lets requests in flight finish
within --shutdown-timeout, cancels the rest (their streams end with an error event and [DONE],
non-streaming ones get 503), and exits 0."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import pytest

from e2e_harness import (HOST, MODEL_NAME, chat_model, open_stream, read_until,  # noqa: F401
                         sse_events, start_server)

FLAGS = ("--block-tokens", "16", "--num-blocks", "512")


def connect_refused(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=2).close()
        return False
    except OSError:
        return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_idle_server_exits_0(start_server, sig):
    srv = start_server(*FLAGS)
    srv.signal(sig)
    started = time.monotonic()
    assert srv.wait_exit(timeout=10) == 0, srv.log()
    assert time.monotonic() - started < 5
    assert "stopped" in srv.log()


def test_in_flight_stream_finishes(start_server):
    srv = start_server(*FLAGS, "--shutdown-timeout", "60")
    sock = open_stream(srv.port, "/v1/completions",
                       {"model": MODEL_NAME, "prompt": "Count", "max_tokens": 40, "temperature": 0,
                        "ignore_eos": True, "stream": True})
    head = read_until(sock, b'"text"')
    srv.signal(signal.SIGTERM)
    # New connections are refused while the stream goes on.
    time.sleep(0.3)
    assert connect_refused(srv.port)
    rest = read_until(sock, b"data: [DONE]")
    sock.close()
    events = sse_events((head + rest).split(b"\r\n\r\n", 1)[1].replace(b"\r\n", b"\n"))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1] if not e.startswith("{\"error")]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert srv.wait_exit(timeout=30) == 0, srv.log()


def test_requests_past_the_bound_are_cancelled(start_server):
    srv = start_server(*FLAGS, "--shutdown-timeout", "0.5")
    # Thousands of steps: still running when the bound passes, even on a starved machine.
    long_request = {"model": MODEL_NAME, "prompt": "Go on", "max_tokens": 3000, "temperature": 0,
                    "ignore_eos": True}
    sock = open_stream(srv.port, "/v1/completions", {**long_request, "stream": True})
    read_until(sock, b'"text"')
    blocking: dict = {}

    def non_streaming():
        blocking["result"] = srv.request("POST", "/v1/completions", long_request, timeout=60)

    thread = threading.Thread(target=non_streaming)
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    srv.signal(signal.SIGTERM)
    rest = read_until(sock, b"data: [DONE]")
    sock.close()
    thread.join(timeout=30)
    assert srv.wait_exit(timeout=30) == 0, srv.log()
    assert time.monotonic() - started < 10
    # The stream ends with an error event, then [DONE].
    events = sse_events(rest.replace(b"\r\n", b"\n"))
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert "shutting down" in error["message"] and error["code"] == "server_shutting_down"
    status, body = blocking["result"]
    assert status == 503 and "shutting down" in json.loads(body)["error"]["message"]
    assert "cancelling the requests still in flight" in srv.log()


def test_a_grammar_still_compiling_is_abandoned_past_the_bound(start_server):
    """XGrammar cannot be interrupted, and it compiled this small schema (400 strings of a
    bounded pattern, each unzipped into 100 optional characters: well inside the schema limits)
    for minutes. Past --shutdown-timeout the server stops waiting for the compile: the request
    gets a 503 and the process exits 0, the compile unfinished, where it used to wait for it."""
    srv = start_server(*FLAGS, "--shutdown-timeout", "0.5")
    # The first grammar builds the vocabulary's grammar view (a second): done beforehand.
    status, body = srv.post("/v1/completions", {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1,
                                                "structured_outputs": {"regex": "a"}})
    assert status == 200, body
    names = [f"p{i}" for i in range(400)]
    schema = {"type": "object", "required": names,
              "properties": {n: {"type": "string", "pattern": "[a-z]{0,100}"} for n in names}}
    result: dict = {}

    def compiling():
        result["reply"] = srv.request(
            "POST", "/v1/completions",
            {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1,
             "response_format": {"type": "json_schema",
                                 "json_schema": {"name": "slow", "schema": schema}}},
            timeout=120)

    thread = threading.Thread(target=compiling)
    thread.start()
    time.sleep(0.3)  # The request reaches its compile.
    srv.signal(signal.SIGTERM)
    # Liveness, not speed: the bound and the cancelling take a second or two; the compile, minutes.
    assert srv.wait_exit(timeout=30) == 0, srv.log()
    thread.join(timeout=30)
    status, body = result["reply"]
    assert status == 503, body
    error = json.loads(body)["error"]
    assert error["message"] == "the server is shutting down"
    assert error["code"] == "server_shutting_down"
    # It was in flight (compiling) when the bound passed.
    assert "cancelling the requests still in flight (1)" in srv.log()
