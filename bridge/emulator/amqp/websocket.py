"""AMQP over WebSockets: ``GET /$servicebus/websocket`` with subprotocol ``AMQPWSB10``, inside TLS.

The SDK's WebSocket transport (``TransportType.AmqpOverWebsocket``, and always when an HTTP proxy is set)
opens ``wss://<host>[:port]/$servicebus/websocket`` with ``Sec-WebSocket-Protocol: AMQPWSB10`` and then
carries the AMQP byte stream in binary messages (the OASIS AMQP WebSocket binding). ``WebSocketGate`` is
the first protocol after the TLS sniffer decided "HTTP": it reads the request head; the upgrade it answers
``101 Switching Protocols`` and hands the connection to an ``AmqpConnection`` through a framing layer
(``_Framing`` decodes the client's masked frames, ``_FramedTransport`` writes unmasked binary frames);
any other request goes on to the HTTP server with the bytes read so far.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import struct
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

PATH = "/$servicebus/websocket"
SUBPROTOCOL = "AMQPWSB10"
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MAX_HEAD = 16 * 1024
_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def is_upgrade(head: bytes) -> bool:
    """True for ``GET /$servicebus/websocket`` asking to upgrade to WebSocket."""
    first, _, rest = head.partition(b"\r\n")
    parts = first.split()
    if len(parts) < 2 or parts[0] != b"GET" or parts[1].split(b"?", 1)[0] != PATH.encode():
        return False
    return _header(rest, b"upgrade").lower() == b"websocket"


def accept_response(head: bytes) -> bytes | None:
    """The ``101`` answer to an upgrade request, or None when it lacks the key or the subprotocol."""
    _, _, rest = head.partition(b"\r\n")
    key = _header(rest, b"sec-websocket-key")
    protocols = [p.strip() for p in _header(rest, b"sec-websocket-protocol").split(b",")]
    if not key or SUBPROTOCOL.encode() not in protocols:
        return None
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())  # noqa: S324 (RFC 6455 requires SHA-1)
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: "
        + accept
        + b"\r\nSec-WebSocket-Protocol: "
        + SUBPROTOCOL.encode()
        + b"\r\n\r\n"
    )


def _header(block: bytes, name: bytes) -> bytes:
    for line in block.split(b"\r\n"):
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip()
    return b""


def encode_frame(payload: bytes, opcode: int = _BINARY) -> bytes:
    """One final, unmasked frame (a server never masks)."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return head + payload


class _FramedTransport(asyncio.Transport):
    """What the AMQP connection writes to: each write becomes one binary frame on the TLS transport."""

    def __init__(self, inner: asyncio.Transport) -> None:
        super().__init__()
        self._inner = inner

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` as one binary message."""
        self._inner.write(encode_frame(bytes(data)))

    def close(self) -> None:
        """Say goodbye with a close frame, then close TLS."""
        if not self._inner.is_closing():
            self._inner.write(encode_frame(struct.pack("!H", 1000), _CLOSE))
        self._inner.close()

    def abort(self) -> None:
        """Drop the connection at once (an injected outage)."""
        self._inner.abort()

    def is_closing(self) -> bool:
        """True once closing."""
        return self._inner.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The TLS transport's (peer name, SSL object, ...)."""
        return self._inner.get_extra_info(name, default)


class _Framing(asyncio.Protocol):
    """Decodes the client's frames into the AMQP connection's byte stream; answers ping and close."""

    def __init__(self, inner: asyncio.Transport, amqp: asyncio.Protocol) -> None:
        self._inner = inner
        self._amqp = amqp
        self._buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        """Feed whole frames' payloads to AMQP; keep a partial frame for the next read."""
        self._buffer += data
        while (frame := self._next_frame()) is not None:
            opcode, payload = frame
            if opcode in (_BINARY, _CONTINUATION, _TEXT):
                self._amqp.data_received(payload)
            elif opcode == _PING:
                self._inner.write(encode_frame(payload, _PONG))
            elif opcode == _CLOSE:
                if not self._inner.is_closing():
                    self._inner.write(encode_frame(payload[:2], _CLOSE))
                self._inner.close()
                return

    def _next_frame(self) -> tuple[int, bytes] | None:
        buf = self._buffer
        if len(buf) < 2:
            return None
        opcode, masked, size, offset = buf[0] & 0x0F, buf[1] & 0x80, buf[1] & 0x7F, 2
        if size == 126:
            if len(buf) < 4:
                return None
            size, offset = struct.unpack_from("!H", buf, 2)[0], 4
        elif size == 127:
            if len(buf) < 10:
                return None
            size, offset = struct.unpack_from("!Q", buf, 2)[0], 10
        mask = b""
        if masked:
            mask, offset = bytes(buf[offset : offset + 4]), offset + 4
        if len(buf) < offset + size:
            return None
        payload = bytes(buf[offset : offset + size])
        del buf[: offset + size]
        if mask and size:
            key = (mask * (size // 4 + 1))[:size]
            payload = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")
        return opcode, payload

    def connection_lost(self, exc: Exception | None) -> None:
        """The AMQP connection goes with the socket."""
        self._amqp.connection_lost(exc)


def upgrade(transport: asyncio.Transport, received: bytes, make_amqp: Callable[[], asyncio.Protocol]) -> bool:
    """Answer the upgrade at the start of ``received`` and run AMQP over the socket; False if refused."""
    head, _, rest = received.partition(b"\r\n\r\n")
    response = accept_response(head)
    if response is None:
        transport.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        transport.close()
        return False
    transport.write(response)
    amqp = make_amqp()
    framed = _FramedTransport(transport)
    framing = _Framing(transport, amqp)
    transport.set_protocol(framing)
    amqp.connection_made(framed)
    if rest:
        framing.data_received(rest)
    return True


def head_complete(buffer: bytes) -> bool:
    """True once the request head (up to the blank line) is in ``buffer``, or it grew too long to wait."""
    return b"\r\n\r\n" in buffer or len(buffer) > _MAX_HEAD
