"""What a browser and the HTTP conventions ask of the server beyond the OpenAI routes, as vLLM's
server (Starlette) answers them: CORS (Access-Control-Allow-Origin on every response to a request
with an allowed Origin, errors and streams included; preflights answered before routing and the
API key), HEAD on every GET route (the GET's status and headers, no body), with a 405 that
names the allowed methods, and vLLM's routes beside the OpenAI ones: /v1/models/{id}, /version,
/ping."""

from __future__ import annotations

import http.client
import json
import re
import subprocess

import openai
import pytest

from e2e_harness import (HOST, LATENT, MODEL_NAME, REPO, LatentServer, chat_model,  # noqa: F401
                         raw_exchange, server, split_head_responses, split_responses,
                         start_server)

C = "/v1/completions"
CHAT = "/v1/chat/completions"
OK = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2}
PAGE = "https://app.example.com"
ALL_METHODS = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
# The last of a pipelined run of raw requests, and the exact bytes that answer it.
PING_LAST = b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
PING_CLOSED = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n"
               b"Connection: close\r\n\r\n{\"status\":\"ok\"}")


def call(srv, method: str, path: str, body=None, headers: dict | None = None):
    """One request; returns (status, headers as a lower-cased dict, body)."""
    conn = http.client.HTTPConnection(HOST, srv.port, timeout=60)
    try:
        all_headers = {}
        if body is not None:
            body = body if isinstance(body, (bytes, str)) else json.dumps(body)
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        conn.request(method, path, body=body, headers=all_headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def preflight(srv, path: str, origin: str = PAGE, method: str = "POST", asked: str | None = None):
    headers = {"Origin": origin, "Access-Control-Request-Method": method}
    if asked is not None:
        headers["Access-Control-Request-Headers"] = asked
    return call(srv, "OPTIONS", path, headers=headers)


# -- CORS --

def test_every_response_to_an_origin_allows_it(server):
    origin = {"Origin": PAGE}
    for method, path, body, status in [("GET", "/health", None, 200),
                                       ("GET", "/v1/models", None, 200),
                                       ("GET", "/metrics", None, 200),
                                       ("POST", C, OK, 200),
                                       ("POST", "/tokenize", {"prompt": "hi"}, 200),
                                       ("POST", C, "{", 400),  # an error
                                       ("GET", "/v2/nothing", None, 404),
                                       ("GET", C, None, 405)]:
        got, headers, data = call(server, method, path, body, origin)
        assert got == status, (path, data)
        assert headers.get("access-control-allow-origin") == "*", (path, headers)
        assert "vary" not in headers, path
        # Not a CORS request: nothing added.
        got, headers, _ = call(server, method, path, body)
        assert got == status and "access-control-allow-origin" not in headers, path


def test_a_stream_allows_the_origin(server):
    status, headers, data = call(server, "POST", C, dict(OK, stream=True), {"Origin": PAGE})
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert headers.get("access-control-allow-origin") == "*"
    assert data.rstrip().endswith(b"data: [DONE]")


def test_a_request_with_cookies_gets_its_own_origin_back(server):
    # Browsers refuse "*" on a request that carries credentials.
    _, headers, _ = call(server, "GET", "/v1/models", headers={"Origin": PAGE, "Cookie": "a=b"})
    assert headers.get("access-control-allow-origin") == PAGE and headers.get("vary") == "Origin"


def test_preflight_on_any_path(server):
    for path in (CHAT, C, "/v1/models", "/no/such/route"):
        status, headers, data = preflight(server, path, asked="authorization, content-type")
        assert (status, data) == (200, b"OK"), path
        assert headers["access-control-allow-origin"] == "*"
        assert headers["access-control-allow-methods"] == ALL_METHODS
        assert headers["access-control-allow-headers"] == "authorization, content-type"
        assert headers["access-control-max-age"] == "600"
        assert headers["content-type"].startswith("text/plain")
    # No headers asked: none echoed.
    status, headers, _ = preflight(server, CHAT)
    assert status == 200 and "access-control-allow-headers" not in headers
    # A method nobody serves.
    status, headers, data = preflight(server, CHAT, method="BREW")
    assert (status, data) == (400, b"Disallowed CORS method")
    # OPTIONS without Access-Control-Request-Method is no preflight: the route's 405.
    status, _, data = call(server, "OPTIONS", CHAT, headers={"Origin": PAGE})
    assert status == 405 and json.loads(data)["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("origins", [f" {PAGE}, http://localhost:3000 ",
                                     json.dumps([PAGE, "http://localhost:3000"])],  # vLLM's
                         ids=["comma-separated", "json-list"])
def test_allowed_origins_and_the_api_key(start_server, origins):
    srv = start_server("--allowed-origins", origins, "--api-key", "sekret", "--block-tokens", "16",
                       "--num-blocks", "64")
    key = {"Authorization": "Bearer sekret"}
    # Browsers send no credentials on a preflight: it must pass without the key.
    for origin in (PAGE, "http://localhost:3000"):
        status, headers, data = preflight(srv, CHAT, origin=origin, asked="authorization")
        assert (status, data) == (200, b"OK")
        assert headers["access-control-allow-origin"] == origin and headers["vary"] == "Origin"
        assert headers["access-control-allow-headers"] == "authorization"
    status, headers, data = preflight(srv, CHAT, origin="https://evil.example.com")
    assert (status, data) == (400, b"Disallowed CORS origin")
    assert "access-control-allow-origin" not in headers and headers["vary"] == "Origin"
    status, _, data = preflight(srv, CHAT, origin="https://evil.example.com", method="BREW")
    assert (status, data) == (400, b"Disallowed CORS origin, method")
    # The allowed page gets its origin back, on the 401 too (so that it can read why).
    status, headers, _ = call(srv, "GET", "/v1/models", headers={"Origin": PAGE, **key})
    assert status == 200 and headers["access-control-allow-origin"] == PAGE
    assert headers["vary"] == "Origin"
    status, headers, data = call(srv, "POST", C, OK, {"Origin": PAGE})
    assert status == 401 and json.loads(data)["error"]["code"] == "invalid_api_key"
    assert headers["access-control-allow-origin"] == PAGE
    # Another page gets nothing.
    status, headers, _ = call(srv, "GET", "/v1/models", headers={"Origin": "https://x.org", **key})
    assert status == 200 and "access-control-allow-origin" not in headers


def test_no_allowed_origins(start_server):
    srv = start_server("--allowed-origins", "", "--block-tokens", "16", "--num-blocks", "64")
    status, headers, _ = call(srv, "GET", "/health", headers={"Origin": PAGE})
    assert status == 200 and "access-control-allow-origin" not in headers
    assert preflight(srv, CHAT)[0] == 400


def test_an_entry_no_origin_can_equal_is_refused(tmp_path):
    # Browsers send "null" or scheme://host[:port], lower-cased, with nothing after: an entry that
    # no Origin header can equal would silently allow nothing.
    for origins, entry, why in [(f"{PAGE}/", f"{PAGE}/", "a path"),
                                (f"{PAGE}?x=1", f"{PAGE}?x=1", "a query"),
                                (f"{PAGE}#top", f"{PAGE}#top", "a fragment"),
                                ("HTTPS://app.example.com", "HTTPS://app.example.com",
                                 "upper case in the scheme"),
                                ("http://localhost:3000,https://App.example.com",
                                 "https://App.example.com", "upper case in the host"),
                                (f'"{PAGE}"', f'"{PAGE}"', "quotes"),
                                (f'["{PAGE}/"]', f"{PAGE}/", "a path")]:
        proc = subprocess.run([str(LATENT), "serve", "--model", str(tmp_path), "--allowed-origins",
                               origins], capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0, origins
        assert f"'{entry}' is not an origin as a browser sends it ({why})" in proc.stderr, (
            origins, proc.stderr)
    # vLLM's JSON list, mistyped: not read as one origin named '["...'.
    proc = subprocess.run([str(LATENT), "serve", "--model", str(tmp_path), "--allowed-origins",
                           f'["{PAGE}"'], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "not a JSON list of strings" in proc.stderr, proc.stderr


def test_an_origin_no_browser_sends_is_never_echoed(server):
    # Under "*" a request with a Cookie gets its Origin back; one with control characters or
    # non-ASCII (h11, under vLLM, refuses the control characters) is not allowed at all.
    for origin in (b"https://a\x0bX", b"https://a\x85", b"https://a\x7f"):
        reply = raw_exchange(server.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: " +
                             origin + b"\r\nCookie: a=b\r\nConnection: close\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 200 ") and b"Access-Control" not in reply, reply
        reply = raw_exchange(server.port, b"OPTIONS /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: " +
                             origin + b"\r\nAccess-Control-Request-Method: GET\r\n"
                             b"Connection: close\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 400 ") and b"Access-Control-Allow-Origin" not in reply
        assert reply.endswith(b"\r\n\r\nDisallowed CORS origin"), reply


def test_requested_headers_no_browser_sends_are_never_echoed(server):
    # A preflight's Access-Control-Request-Headers is echoed (every header is allowed), but not
    # one holding control characters, DEL or non-ASCII, which vLLM's HTTP layer never lets through:
    # the preflight is refused as Starlette refuses headers it does not allow, nothing echoed.
    def ask(headers: bytes, origin: bytes = PAGE.encode()) -> bytes:
        return raw_exchange(server.port, b"OPTIONS /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: " +
                            origin + b"\r\nAccess-Control-Request-Method: GET\r\n"
                            b"Access-Control-Request-Headers: " + headers +
                            b"\r\nConnection: close\r\n\r\n")
    for asked in (b"x-a\x0bx-b", b"x-a\x01", b"x-a\x1b[2J", b"x-a\x7f", b"x-\xc3\xa4"):
        reply = ask(asked)
        assert reply.startswith(b"HTTP/1.1 400 "), reply
        assert reply.endswith(b"\r\n\r\nDisallowed CORS headers"), reply
        head = reply.partition(b"\r\n\r\n")[0]
        assert b"Access-Control-Allow-Headers" not in head and asked not in head, reply
        assert b"Access-Control-Allow-Origin: *" in head, reply
    reply = ask(b"x-a\x0b", origin=b"https://a\x7f")
    assert reply.endswith(b"\r\n\r\nDisallowed CORS origin, headers"), reply
    # Blanks and tabs between names are a header's own: echoed as sent.
    reply = ask(b"authorization,\tcontent-type")
    assert reply.startswith(b"HTTP/1.1 200 "), reply
    assert b"\r\nAccess-Control-Allow-Headers: authorization,\tcontent-type\r\n" in reply, reply


# -- HEAD --

def raw_request(method: str, path: str, headers: bytes = b"") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n".encode() + headers + b"\r\n"


def test_head_is_get_without_the_body(server):
    # On the wire, pipelined on one connection with a GET behind: each HEAD is answered by its
    # GET's head, byte for byte, and no body, which would be read as the next response. (Only the
    # raw bytes can tell: http.client reads no body after a HEAD, whatever the server sends.)
    paths = ("/health", "/v1/models", f"/v1/models/{MODEL_NAME}", "/version", "/ping")
    gets = split_responses(raw_exchange(server.port, b"".join(raw_request("GET", p) for p in paths)
                                        + PING_LAST))
    assert len(gets) == len(paths) + 1 and all(body for _, body in gets)
    assert b"".join(gets[-1]) == PING_CLOSED
    heads, rest = split_head_responses(
        raw_exchange(server.port, b"".join(raw_request("HEAD", p) for p in paths + ("/metrics",))
                     + PING_LAST), [200] * (len(paths) + 1))
    assert heads[:-1] == [head for head, _ in gets[:-1]]
    assert rest == PING_CLOSED
    # /metrics' counters move between requests: its head has the GET's type and some length.
    _, get_headers, _ = call(server, "GET", "/metrics")
    assert f"\r\nContent-Type: {get_headers['content-type']}\r\n".encode() in heads[-1]
    assert int(re.search(rb"\r\nContent-Length: (\d+)\r\n", heads[-1]).group(1)) > 0


def test_head_errors_have_no_body_and_405_names_the_methods(server):
    # The error's head alone, as its GET's but for the message, which names the method.
    paths = ("/v2/nothing", C)
    gets = split_responses(raw_exchange(server.port, b"".join(raw_request("GET", p) for p in paths)
                                        + PING_LAST))
    heads, rest = split_head_responses(
        raw_exchange(server.port, b"".join(raw_request("HEAD", p) for p in paths) + PING_LAST),
        [404, 405])
    assert rest == PING_CLOSED
    for head, (get_head, get_body) in zip(heads, gets):
        head_body = get_body.replace(b" GET ", b" HEAD ")
        assert head_body != get_body and json.loads(head_body)
        assert head == get_head.replace(f"Content-Length: {len(get_body)}\r\n".encode(),
                                        f"Content-Length: {len(head_body)}\r\n".encode())
    assert b"\r\nAllow: POST\r\n" in heads[1]
    status, headers, body = call(server, "GET", C)
    assert status == 405 and headers["allow"] == "POST"
    assert json.loads(body)["error"]["code"] == "method_not_allowed"
    status, headers, body = call(server, "POST", "/health", {})
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert json.loads(body)["error"]["code"] == "method_not_allowed"


# -- vLLM's other routes --

def test_a_model_by_id(server):
    listed = json.loads(call(server, "GET", "/v1/models")[2])["data"][0]
    for path in (f"/v1/models/{MODEL_NAME}", "/v1/models/ti%6Ey"):  # percent-decoded
        status, _, data = call(server, "GET", path)
        assert status == 200 and json.loads(data) == listed, path
    assert server.client().models.retrieve(MODEL_NAME).id == MODEL_NAME
    # The id as decoded (a NUL kept: the message is not cut there), or as sent if it cannot be.
    for asked, named in (("other", "other"), ("%zz", "%zz"),
                         (f"{MODEL_NAME}%00", f"{MODEL_NAME}\0")):
        status, _, data = call(server, "GET", f"/v1/models/{asked}")
        error = json.loads(data)["error"]
        assert status == 404 and error == {
            "message": f"The model '{named}' does not exist; this server serves '{MODEL_NAME}'",
            "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    with pytest.raises(openai.NotFoundError):
        server.client().models.retrieve("other")
    status, _, data = call(server, "GET", "/v1/models/")
    assert status == 404 and json.loads(data)["error"]["code"] == "not_found"
    # Every id's responses count under one label.
    m = server.metrics()
    assert m['latent_http_responses_total{path="/v1/models/{id}",status="404"}'] >= 4
    assert not [k for k in m if "/v1/models/other" in k]


def test_a_model_name_with_a_slash(chat_model, tmp_path):
    srv = LatentServer(chat_model, tmp_path / "serve.log", "--block-tokens", "16", "--num-blocks",
                       "64", "--api-key", "sekret", name="org/tiny")
    try:
        key = {"Authorization": "Bearer sekret"}
        for path in ("/v1/models/org/tiny", "/v1/models/org%2Ftiny"):
            status, _, data = call(srv, "GET", path, headers=key)
            assert status == 200 and json.loads(data)["id"] == "org/tiny", path
        assert srv.client(api_key="sekret").models.retrieve("org/tiny").id == "org/tiny"
    finally:
        assert srv.stop() == 0


def test_version(server):
    version = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    status, headers, data = call(server, "GET", "/version")
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(data) == {"version": version.group(1)}


def test_ping(server):
    # SageMaker's health check; vLLM answers it on GET and POST.
    for method, body in (("GET", None), ("POST", b""), ("POST", b"{}")):
        status, _, data = call(server, method, "/ping", body)
        assert status == 200 and data == b'{"status":"ok"}'
    status, headers, _ = call(server, "PUT", "/ping", b"")
    assert status == 405 and headers["allow"] == "GET, HEAD, POST"
