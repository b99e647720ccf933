"""Empty ``ServiceBusMessageBatch``es that encode each message once instead of twice.

The SDK's ``ServiceBusMessageBatch.add_message`` encodes a message to learn its size
(``get_message_encoded_size``) and then encodes it again to append the bytes to the batch (``add_batch``):
both are methods of the batch's AMQP transport, which the batch's constructor takes as ``amqp_transport``.
``make_batch`` passes ``EncodeOnceTransport``: its size call keeps the bytes it made (per thread) and its
add call appends those same bytes when the message is the one just measured, so the batch holds exactly
the bytes the SDK's own path would put there, made once. The second encoding was an eighth of a drain
thread's time in a profile of one shard at 2,000 msgs/s (``docs/servicebus-sdk.md``).

The sender sends a batch with its own transport (``send_messages`` reads the batch's message list), so
nothing else about the batch changes. ``encodes_as_the_sdk`` checks, once per process, that a batch made
here holds the same bytes as the SDK's for a sample message; if a future SDK changed the two calls'
contract it would not, and ``make_batch`` then falls back to the SDK's own transport.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

_last = threading.local()
"""The message last measured on this thread and its bytes: ``(message, bytearray)``."""


class EncodeOnceTransport(PyamqpTransport):
    """The SDK's pyamqp transport whose batches reuse the bytes made to measure a message."""

    @staticmethod
    def get_message_encoded_size(message: Any) -> int:
        output = bytearray()
        encode_payload(output, message)
        _last.value = (message, output)
        return len(output)

    @staticmethod
    def add_batch(sb_message_batch: ServiceBusMessageBatch, outgoing_sb_message: ServiceBusMessage) -> None:
        message = outgoing_sb_message._message
        last = getattr(_last, "value", None)
        _last.value = None
        if last is not None and last[0] is message:
            sb_message_batch._message[5].append(last[1])  # the batch's data sections, as the SDK appends
        else:  # not the message just measured: encode it as the SDK does
            PyamqpTransport.add_batch(sb_message_batch, outgoing_sb_message)


@cache
def encodes_as_the_sdk() -> bool:
    """Whether a batch made with ``EncodeOnceTransport`` holds the SDK's own bytes (checked once)."""

    def sample() -> ServiceBusMessage:
        properties: dict[str | bytes, Any] = {"a": 1, "b": "two"}
        return ServiceBusMessage(
            b"x" * 300, message_id="encode-check", partition_key="k", application_properties=properties
        )

    ours = ServiceBusMessageBatch(max_size_in_bytes=4096, amqp_transport=EncodeOnceTransport)
    theirs = ServiceBusMessageBatch(max_size_in_bytes=4096)
    try:
        ours.add_message(sample())
        theirs.add_message(sample())
        same = [bytes(b) for b in ours._message[5]] == [bytes(b) for b in theirs._message[5]]
        return same and ours.size_in_bytes == theirs.size_in_bytes and len(ours) == len(theirs) == 1
    except Exception:  # any change of shape: use the SDK's own path
        return False


def make_batch(max_size_in_bytes: int) -> ServiceBusMessageBatch:
    """An empty batch of the link's size that encodes each message once (the SDK's own when it cannot)."""
    if encodes_as_the_sdk():
        return ServiceBusMessageBatch(max_size_in_bytes=max_size_in_bytes, amqp_transport=EncodeOnceTransport)
    return ServiceBusMessageBatch(max_size_in_bytes=max_size_in_bytes)
