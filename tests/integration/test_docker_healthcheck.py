"""``docker/healthcheck.py``, the images' HEALTHCHECK, against real loopback listeners (no engine needed)."""

from __future__ import annotations

import importlib.util
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bridge.embedded.ports import free_port
from tests.integration.container_support import ROOT


def _healthcheck() -> Any:
    path = ROOT / "docker" / "healthcheck.py"
    spec = importlib.util.spec_from_file_location("healthcheck", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


healthcheck = _healthcheck()


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_the_url_comes_from_healthcheck_url_else_the_metrics_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEALTHCHECK_URL", raising=False)
    monkeypatch.delenv("BRIDGE_METRICS_PORT", raising=False)
    assert healthcheck.target() is None
    assert healthcheck.main() == 0  # nothing to probe: the container's exit is the signal
    monkeypatch.setenv("BRIDGE_METRICS_PORT", "9100")
    assert healthcheck.target() == "http://127.0.0.1:9100/metrics"
    monkeypatch.setenv("HEALTHCHECK_URL", "tcp://127.0.0.1:5671")
    assert healthcheck.target() == "tcp://127.0.0.1:5671"


def test_http_must_answer_2xx(http_port: int) -> None:
    assert healthcheck.probe(f"http://127.0.0.1:{http_port}/healthz") is None
    assert "503" in healthcheck.probe(f"http://127.0.0.1:{http_port}/other")
    assert healthcheck.probe(f"http://127.0.0.1:{free_port()}/healthz") is not None


def test_tcp_must_accept_a_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert healthcheck.probe(f"tcp://127.0.0.1:{port}") is None
        monkeypatch.setenv("HEALTHCHECK_URL", f"tcp://127.0.0.1:{port}")
        assert healthcheck.main() == 0
    monkeypatch.setenv("HEALTHCHECK_URL", f"tcp://127.0.0.1:{port}")
    assert healthcheck.main() == 1
    assert "must be http://" in healthcheck.probe("ftp://127.0.0.1/")
