"""The h11 connection handler over real loopback sockets: keep-alive, limits, errors, TLS."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bridge.emulator.certs import ensure_certificate, server_ssl_context
from bridge.emulator.http.server import HttpRequest, HttpResponse
from tests.loop_server import LoopThread

seen: list[HttpRequest] = []


async def echo(request: HttpRequest) -> HttpResponse:
    seen.append(request)
    if request.path == "/boom":
        raise RuntimeError("secret detail that must not leak")
    if request.path == "/slow":
        await asyncio.sleep(0.2)
    body = f"{request.method} {request.path} {sorted(request.query.items())} {len(request.body)}".encode()
    return HttpResponse(200, {"Content-Type": "text/plain"}, body)


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    seen.clear()
    with LoopThread() as running:
        yield running


def test_keep_alive_serves_several_requests_on_one_connection(loop: LoopThread) -> None:
    port = loop.serve(echo)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        first = client.get("/a%2Fb/c", params={"x": "1", "$top": "5"})
        second = client.put("/q1", content=b"x" * 1000)
    assert first.text == "GET /a%2Fb/c [('$top', '5'), ('x', '1')] 0"
    assert second.text == "PUT /q1 [] 1000"
    assert seen[0].headers["host"] == f"127.0.0.1:{port}"
    assert len(seen) == 2


def test_one_socket_carries_sequential_requests(loop: LoopThread) -> None:
    port = loop.serve(echo)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /one HTTP/1.1\r\nHost: h\r\n\r\n")
        first = b""
        while not first.endswith(b"GET /one [] 0"):
            first += sock.recv(4096)
        sock.sendall(b"GET /two HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        second = b""
        while chunk := sock.recv(4096):
            second += chunk
    assert first.startswith(b"HTTP/1.1 200 ") and b"connection: close" not in first.lower()
    assert second.startswith(b"HTTP/1.1 200 ") and second.endswith(b"GET /two [] 0")


def test_a_handler_exception_is_a_generic_500_and_the_connection_survives(
    loop: LoopThread, caplog: pytest.LogCaptureFixture
) -> None:
    port = loop.serve(echo)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        failed = client.get("/boom")
        after = client.get("/fine")
    assert failed.status_code == 500
    assert "secret" not in failed.text
    assert after.status_code == 200
    assert "http handler failed on GET /boom" in caplog.text


def test_oversized_body_is_refused_with_413_and_a_close(loop: LoopThread) -> None:
    port = loop.serve(echo, max_body=100)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        response = client.put("/q1", content=b"x" * 101)
    assert response.status_code == 413
    assert response.headers["connection"] == "close"
    assert seen == []


def test_oversized_chunked_body_is_refused(loop: LoopThread) -> None:
    port = loop.serve(echo, max_body=100)

    def chunks() -> Iterator[bytes]:
        for _ in range(5):
            yield b"y" * 50

    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        response = client.put("/q1", content=chunks())
    assert response.status_code == 413
    assert seen == []


def _raw(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        return received


def test_malformed_request_gets_400_and_a_close(loop: LoopThread) -> None:
    port = loop.serve(echo)
    reply = _raw(port, b"NOT HTTP AT ALL\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert seen == []


def test_connection_close_is_honoured(loop: LoopThread) -> None:
    port = loop.serve(echo)
    reply = _raw(port, b"GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert reply.endswith(b"GET /x [] 0")


def test_pipelined_requests_are_answered_in_order(loop: LoopThread) -> None:
    port = loop.serve(echo)
    reply = _raw(
        port,
        b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /second HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    )
    assert reply.index(b"GET /slow") < reply.index(b"GET /second")


def test_idle_connection_is_closed(loop: LoopThread) -> None:
    port = loop.serve(echo, idle_timeout=0.2)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        assert sock.recv(10) == b""


def test_tls_with_the_emulator_certificate(loop: LoopThread, tmp_path: Path) -> None:
    files = ensure_certificate(tmp_path)
    port = loop.serve(echo, ssl_context=server_ssl_context(files.cert, files.key))
    with httpx.Client(
        base_url=f"https://127.0.0.1:{port}", verify=ssl.create_default_context(cafile=str(files.cert))
    ) as client:
        assert client.get("/over-tls").text == "GET /over-tls [] 0"
