"""A python-qpid-proton client for the request/response nodes: CBS put-token, then ``<entity>/$management``.

A real AMQP client that is not one of the SDKs: it keeps the AMQP types of the answers (arrays, described
values), which the .NET and Java clients read and the Python SDK flattens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

from proton import Message
from proton.reactor import LinkOption
from proton.utils import BlockingConnection

from bridge.embedded.namespaces import LocalNamespace


@dataclass
class Requests:
    """``requests(operation, body)`` asks the entity's ``$management`` node; ``put_token``: the CBS answer."""

    call: Callable[[str, Any], Message]
    put_token: Message

    def __call__(self, operation: str, body: Any) -> Message:
        return self.call(operation, body)


class ReplyTo(LinkOption):
    """Service Bus answers on the client's receiver link whose target is the request's ``reply-to``."""

    def __init__(self, address: str) -> None:
        self.address = address

    def apply(self, link: Any) -> None:
        link.target.address = self.address


def sas_token(key_name: str, key: str, audience: str) -> str:
    """A SAS token for ``audience``, valid for five minutes."""
    expiry = str(int(time.time()) + 300)
    signed = quote_plus(audience)
    signature = base64.b64encode(
        hmac.new(key.encode(), f"{signed}\n{expiry}".encode(), hashlib.sha256).digest()
    ).decode()
    return f"SharedAccessSignature sr={signed}&sig={quote_plus(signature)}&se={expiry}&skn={key_name}"


@contextmanager
def proton_requests(ns: LocalNamespace, path: str) -> Iterator[Requests]:
    """Put a SAS token for ``path``, then yield ``request(operation, body)`` on ``path/$management``."""
    fields = dict(part.split("=", 1) for part in ns.connection_string.split(";") if "=" in part)
    host = fields["Endpoint"].removeprefix("sb://").strip("/")
    conn = BlockingConnection(f"amqp://{host}", sasl_enabled=True, allowed_mechs="ANONYMOUS", timeout=10)

    def call(node: str, properties: dict[str, Any], body: Any) -> Message:
        reply = f"reply-{uuid.uuid4().hex[:8]}"
        receiver = conn.create_receiver(node, options=ReplyTo(reply))
        sender = conn.create_sender(node)
        sender.send(Message(body=body, reply_to=reply, id=uuid.uuid4().hex, properties=properties))
        answer = receiver.receive(timeout=10)
        receiver.accept()
        receiver.close()  # type: ignore[no-untyped-call]
        sender.close()  # type: ignore[no-untyped-call]
        assert answer is not None
        return answer

    try:
        audience = f"sb://{host}/{path}"
        token = sas_token(fields["SharedAccessKeyName"], fields["SharedAccessKey"], audience)
        put = {"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience}
        answer = call("$cbs", put, token)
        granted: dict[str, Any] = answer.properties or {}
        assert granted["status-code"] == 202
        yield Requests(
            lambda operation, body: call(f"{path}/$management", {"operation": operation}, body), answer
        )
    finally:
        conn.close()
