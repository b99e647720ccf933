"""Message sections as the broker reads them: message ids assigned where a sender gave none, and ids of
every AMQP type read back the same each time (``bridge/emulator/amqp/codec.py``)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from proton import Message, ulong

from bridge.emulator.amqp.codec import parse_message, split_sections


def parsed(message: Message) -> tuple[str | None, Message]:
    """The broker's message id for ``message`` and the message it stores, decoded again."""
    result = parse_message(split_sections(bytes(message.encode())), with_properties=True)
    stored = Message()
    stored.decode(result.raw)
    return result.message_id, stored


@pytest.mark.parametrize(
    "message",
    [
        Message(body="no properties section"),
        Message(body="properties without an id", subject="s", reply_to="r", group_id="g"),
        Message(body="long properties", subject="s" * 300, content_type="text/plain"),
    ],
    ids=["absent", "short-list", "long-list"],
)
def test_a_message_without_an_id_gets_one_and_keeps_every_other_field(message: Message) -> None:
    message_id, stored = parsed(message)
    assert message_id is not None and len(message_id) == 32 and int(message_id, 16) >= 0
    assert stored.id == message_id
    assert (stored.body, stored.subject, stored.reply_to, stored.group_id, stored.content_type) == (
        message.body,
        message.subject,
        message.reply_to,
        message.group_id,
        message.content_type,
    )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("text-id", "text-id"),
        (b"binary-id", "binary-id"),
        (ulong(5), "5"),
        (uuid.UUID(int=7), str(uuid.UUID(int=7))),
    ],
    ids=["string", "binary", "ulong", "uuid"],
)
def test_a_given_id_of_any_type_is_kept_and_read_as_the_same_text(given: Any, expected: str) -> None:
    message_id, stored = parsed(Message(body="x", id=given))
    assert message_id == expected
    assert stored.id == given
    assert parsed(Message(body="y", id=given))[0] == message_id  # stable: duplicate detection reads it
