"""The management certificate: files, reuse, and a real TLS handshake a default client context trusts."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509

from bridge.emulator.certs import ensure_certificate, server_ssl_context
from bridge.errors import EmulatorError


def test_files_are_written_with_a_private_key_mode(tmp_path: Path) -> None:
    files = ensure_certificate(tmp_path / "tls")
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert dt.timedelta(days=364) < lifetime < dt.timedelta(days=366)


def test_valid_files_are_reused(tmp_path: Path) -> None:
    first = ensure_certificate(tmp_path)
    before = first.cert.read_bytes()
    second = ensure_certificate(tmp_path)
    assert second.cert.read_bytes() == before


def test_nearly_expired_certificate_is_replaced(tmp_path: Path) -> None:
    first = ensure_certificate(tmp_path).cert.read_bytes()
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=365)
    assert ensure_certificate(tmp_path, now=later).cert.read_bytes() != first


def test_other_bind_host_gets_a_certificate_naming_it(tmp_path: Path) -> None:
    first = ensure_certificate(tmp_path).cert.read_bytes()
    files = ensure_certificate(tmp_path, host="127.0.0.2")
    assert files.cert.read_bytes() != first
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    ips = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.IPAddress
    )
    assert sorted(str(ip) for ip in ips) == ["127.0.0.1", "127.0.0.2"]


def test_corrupt_files_are_replaced(tmp_path: Path) -> None:
    files = ensure_certificate(tmp_path)
    files.key.write_bytes(b"not a key")
    ensure_certificate(tmp_path)
    server_ssl_context(files.cert, files.key)


def test_unloadable_certificate_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("nope")
    (tmp_path / "key.pem").write_text("nope")
    with pytest.raises(EmulatorError, match="cannot load the management certificate"):
        server_ssl_context(tmp_path / "cert.pem", tmp_path / "key.pem")


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, server_hostname: str) -> bytes:
    """One TLS round trip over loopback: the server echoes what it reads."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(tls.recv(16))
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls,
        ):
            tls.sendall(b"ping")
            return tls.recv(16)
    finally:
        thread.join(5)
        listener.close()


@pytest.mark.parametrize("server_hostname", ["localhost", "127.0.0.1"])
def test_default_client_context_verifies_the_server(tmp_path: Path, server_hostname: str) -> None:
    files = ensure_certificate(tmp_path)
    client = ssl.create_default_context(cafile=str(files.cert))
    client.verify_flags |= ssl.VERIFY_X509_STRICT
    assert _handshake(server_ssl_context(files.cert, files.key), client, server_hostname) == b"ping"


def test_a_client_trusting_another_certificate_refuses_the_server(tmp_path: Path) -> None:
    ours = ensure_certificate(tmp_path / "a")
    theirs = ensure_certificate(tmp_path / "b")
    client = ssl.create_default_context(cafile=str(theirs.cert))
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server_ssl_context(ours.cert, ours.key), client, "localhost")
