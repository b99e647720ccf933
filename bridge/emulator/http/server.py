"""A small HTTP/1.1 connection handler on ``h11`` for the emulator's management and control endpoints.

Why not a framework: the management endpoint shares its port with AMQP (the server peeks the first byte
and hands TLS connections here), and everything runs in the emulator's one event loop. ``serve_http`` takes
an already-accepted stream pair, so it works the same for a TLS-wrapped socket and for
``asyncio.start_server(lambda r, w: serve_http(r, w, app), ...)``.

Behaviour: keep-alive until the client closes or asks to; a request body above ``max_body`` gets 413 and the
connection is closed; malformed HTTP gets 400 and a close; a connection idle for ``idle_timeout`` seconds
is closed; an exception in the app becomes a 500 with a generic body (logged with its traceback) and the
connection carries on. The app is an ``HttpApp``: ``async (HttpRequest) -> HttpResponse``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

import h11

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
IDLE_TIMEOUT = 60.0
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One request: ``path`` still percent-encoded as sent; ``query`` last value wins; header names lower."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """One response; ``Content-Length`` and ``Date`` are added by the server."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


HttpApp = Callable[[HttpRequest], Awaitable[HttpResponse]]


class _Reject(Exception):
    """The request cannot be served; answer ``response`` and close the connection."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status)
        self.response = response


async def serve_http(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    app: HttpApp,
    *,
    max_body: int = MAX_BODY,
    idle_timeout: float = IDLE_TIMEOUT,
) -> None:
    """Serve requests on one connection until it closes; never raises for client or app misbehaviour."""
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            try:
                request = await _read_request(conn, reader, writer, max_body, idle_timeout)
            except _Reject as reject:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await _send(conn, writer, reject.response, close=True)
                break
            if request is None:
                break
            response = await _call(app, request)
            close = conn.their_state is h11.MUST_CLOSE or _wants_close(request)
            await _send(conn, writer, response, close=close)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                break
            conn.start_next_cycle()
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, h11.LocalProtocolError) as exc:
        log.debug("http connection dropped: %s", exc.__class__.__name__)
    except asyncio.CancelledError:
        # This coroutine is the whole life of a connection task that nobody awaits; ending it normally
        # on shutdown avoids Python 3.11's StreamReaderProtocol logging the cancellation as an error.
        log.debug("http connection cancelled at shutdown")
    finally:
        await _close(writer)


async def _read_request(
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    max_body: int,
    idle_timeout: float,
) -> HttpRequest | None:
    """The next complete request, or ``None`` when the client closed or went idle between requests."""
    head: h11.Request | None = None
    body = bytearray()
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise _Reject(_text(exc.error_status_hint, "malformed HTTP request")) from None
        if event is h11.NEED_DATA:
            if head is not None and conn.they_are_waiting_for_100_continue:
                writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
            try:
                data = await asyncio.wait_for(reader.read(_READ_CHUNK), idle_timeout)
            except TimeoutError:
                if head is None:
                    return None
                raise _Reject(_text(408, "request timeout")) from None
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
            declared = _header(event.headers, b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_body:
                raise _Reject(_text(413, "request body too large"))
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_body:
                raise _Reject(_text(413, "request body too large"))
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return _request(head, bytes(body))
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


async def _call(app: HttpApp, request: HttpRequest) -> HttpResponse:
    try:
        return await app(request)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("http handler failed on %s %s", request.method, request.path)
        return _text(500, "internal error")


async def _send(
    conn: h11.Connection, writer: asyncio.StreamWriter, response: HttpResponse, close: bool
) -> None:
    framing = ("content-length", "connection", "transfer-encoding")
    headers = [(k, v) for k, v in response.headers.items() if k.lower() not in framing]
    headers.append(("Content-Length", str(len(response.body))))
    if close:
        headers.append(("Connection", "close"))
    try:
        reason = HTTPStatus(response.status).phrase.encode()
    except ValueError:
        reason = b""
    writer.write(conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason)) or b"")
    if response.body:
        writer.write(conn.send(h11.Data(data=response.body)) or b"")
    writer.write(conn.send(h11.EndOfMessage()) or b"")
    await writer.drain()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    # A TLS peer that vanished can make the close handshake wait; never let it hold the loop's task.
    with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError, OSError):
        await asyncio.wait_for(writer.wait_closed(), 2.0)


def _request(head: h11.Request, body: bytes) -> HttpRequest:
    target = head.target.decode("latin-1")
    parts = urlsplit(target)
    headers: dict[str, str] = {}
    for name, value in head.headers:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return HttpRequest(
        method=head.method.decode("ascii"),
        path=parts.path or "/",
        query=dict(parse_qsl(parts.query, keep_blank_values=True)),
        headers=headers,
        body=body,
    )


def _wants_close(request: HttpRequest) -> bool:
    return "close" in request.headers.get("connection", "").lower()


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


def _text(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, {"Content-Type": "text/plain; charset=utf-8"}, message.encode() + b"\n")
