"""What runs inside a TLS connection to the namespace's port: AMQPS or HTTPS, told apart by its first bytes.

A client built from a namespace name (``ServiceBusClient(fully_qualified_namespace, credential)``) dials
AMQP over TLS; the administration client dials HTTPS to the same host and port. After the handshake the
first four bytes say which: ``AMQP`` (the protocol header, SASL or plain) goes to the AMQP engine, anything
else is HTTP: ``GET /$servicebus/websocket`` asking to upgrade becomes AMQP over WebSockets
(``websocket.py``), every other request goes to the management endpoint. The decision is
taken once per connection by swapping the TLS transport's protocol, so no byte is read twice or lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from bridge.emulator.amqp import websocket

AMQP_HEADER = b"AMQP"

HttpHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


class TlsSniffer(asyncio.Protocol):
    """The first protocol of a TLS connection: buffers until it can tell AMQP from HTTP, then hands over."""

    def __init__(self, make_amqp: Callable[[], asyncio.Protocol], serve_http: HttpHandler) -> None:
        self._make_amqp = make_amqp
        self._serve_http = serve_http
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the TLS transport until the first bytes arrive."""
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        """Buffer until four bytes (or a mismatch) decide, then hand everything to the chosen protocol."""
        self._buffer += data
        head = self._buffer[: len(AMQP_HEADER)]
        if len(head) < len(AMQP_HEADER) and AMQP_HEADER.startswith(head):
            return
        transport = self._transport
        assert transport is not None
        if (
            head != AMQP_HEADER
            and self._buffer.startswith(b"GET ")
            and not websocket.head_complete(self._buffer)
        ):
            return  # a GET may be the WebSocket upgrade: wait for its whole head
        if head != AMQP_HEADER and websocket.is_upgrade(self._buffer.split(b"\r\n\r\n", 1)[0]):
            websocket.upgrade(transport, self._buffer, self._make_amqp)
            return
        if head == AMQP_HEADER:
            amqp = self._make_amqp()
            transport.set_protocol(amqp)
            amqp.connection_made(transport)
            amqp.data_received(self._buffer)
            return
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        http = asyncio.StreamReaderProtocol(reader)
        transport.set_protocol(http)
        http.connection_made(transport)
        http.data_received(self._buffer)
        writer = asyncio.StreamWriter(transport, http, reader, loop)
        self.task = loop.create_task(self._serve_http(reader, writer))

    def connection_lost(self, exc: Exception | None) -> None:
        """Closed before saying anything: nothing to hand over."""
        self._transport = None
