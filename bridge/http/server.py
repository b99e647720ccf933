"""How ``bridge serve`` runs the app under uvicorn: TLS from the settings, header names as sent.

uvicorn lower-cases every request header name before the app sees it (ASGI requires lower-case names).
The Service Bus REST door turns custom headers into application properties, and Azure keeps their names as
the client wrote them (``Priority`` stays ``Priority``), so ``HeaderCaseProtocol`` (uvicorn's httptools
protocol plus one line) also records each header's name as it arrived, in order, in the ASGI scope's
``extensions["bridge.header_names"]``; ``bridge.http.rest_door`` reads it. Without it (another server, an
in-process test client) the door falls back to the lower-case names.

TLS: ``ingress.tls_certificate`` and ``ingress.tls_key`` make uvicorn serve HTTPS only. HTTP/1.1
keep-alive is uvicorn's default (connections stay open ``timeout_keep_alive`` = 5 s between requests).
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bridge.settings import Settings

HEADER_NAMES = "bridge.header_names"


class HeaderCaseProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that also keeps each request header's name as sent (module docstring)."""

    def on_message_begin(self) -> None:
        """Start a request: the scope gets an empty list of names that ``on_header`` fills."""
        super().on_message_begin()
        self._header_names: list[bytes] = []
        extensions = self.scope.setdefault("extensions", {})
        extensions[HEADER_NAMES] = {"names": self._header_names}

    def on_header(self, name: bytes, value: bytes) -> None:
        """Record ``name`` as sent; the rest is uvicorn's own ``on_header`` (0.54), written out.

        Written out rather than called through ``super()``: the parser calls this once per header of every
        request, and the extra call doubled its cost (six headers, measured with ``timeit``: uvicorn's own
        6.4 µs, through ``super()`` 13.5 µs, written out 7.1 µs). The ``Expect: 100-continue`` handling is
        covered by the REST client tests (curl sends it).
        """
        self._header_names.append(name)
        lowered = name.lower()
        if lowered == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((lowered, value))


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The ``uvicorn.run``/``uvicorn.Config`` keywords that follow from the settings."""
    options: dict[str, Any] = {"http": HeaderCaseProtocol}
    ingress = settings.ingress
    if ingress.tls_certificate is not None and ingress.tls_key is not None:
        options["ssl_certfile"] = str(ingress.tls_certificate)
        options["ssl_keyfile"] = str(ingress.tls_key)
    return options
