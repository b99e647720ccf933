"""Backlog aliasing round trip (``docs/paired.md``) through a real backlog queue and the real SDK.

``to_backlog_message`` → send to ``<ns>/x-servicebus-transfer/0`` on the secondary → peek-lock →
``from_backlog_message`` → send to the destination on the primary → complete in the backlog.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from bridge.core.aliasing import (
    ALIAS_PARTITION_KEY,
    ALIAS_PATH,
    ALIAS_SCHEDULED_ENQUEUE_TIME,
    ALIAS_SESSION_ID,
    ALIAS_TIME_TO_LIVE,
    ExpiredInBacklog,
    NotAliased,
)
from bridge.core.envelope import Envelope
from bridge.core.paired import backlog_queue_path
from bridge.embedded.namespaces import LocalNamespace
from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.messages import (
    BacklogMessage,
    RestoredMessage,
    from_backlog_message,
    to_backlog_message,
    to_message,
)
from tests.integration.servicebus_support import body_of, drain, pool_for, settings_for

pytestmark = pytest.mark.timeout(120)
# The real path is backlog_queue_path("primary-ns", 0) = "primary-ns/x-servicebus-transfer/0"; the local
# Service Bus refuses '/' in entity names (HTTP 400), so the queue here has the same name with dashes. The
# round trip does not depend on the backlog queue's name.
BACKLOG = backlog_queue_path("primary-ns", 0).replace("/", "-")
PROPERTIES = {
    "text": "plain",
    "raw": b"\x00\xff",
    "count": 7,
    "big": 2**40,
    "when": datetime(2024, 5, 6, 7, 8, 9, 250000, tzinfo=UTC),
    "span": timedelta(minutes=2),
    "id": uuid.UUID(int=5),
}


@pytest.fixture
def namespace_pair(
    namespace_pair: tuple[LocalNamespace, LocalNamespace],
) -> tuple[LocalNamespace, LocalNamespace]:
    """The pair, with the backlog queue created in the secondary through the admin wrapper."""
    secondary_settings = settings_for(*namespace_pair).secondary
    assert secondary_settings is not None
    with NamespaceAdmin(secondary_settings) as admin:
        admin.create_queue(BACKLOG, lock_duration=timedelta(minutes=1))
    return namespace_pair


def test_backlog_round_trip_restores_every_field(
    namespace_pair: tuple[LocalNamespace, LocalNamespace],
) -> None:
    primary, secondary = namespace_pair
    scheduled = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
    env = Envelope(
        entity="orders",
        message_id="m-1",
        body=b"\x01body",
        accepted_at=time.time(),
        content_type="application/json",
        correlation_id="c-1",
        subject="s",
        reply_to="r",
        to="t",
        session_id="sess-9",
        partition_key="sess-9",
        time_to_live=600.0,
        scheduled_enqueue_time_utc=scheduled,
        application_properties=dict(PROPERTIES),
    )
    with pool_for(primary, secondary) as pool:
        # Given the message aliased into a backlog queue of the secondary
        aliased = to_backlog_message(env)
        assert isinstance(aliased, BacklogMessage) and aliased.destination == "orders"
        assert pool.send("secondary", BACKLOG, [aliased.message]).accepted == [0]
        # Then the broker message carries no SessionId, TTL, schedule or partition key, only aliases
        (in_backlog,) = pool.queues.receive_batch("secondary", BACKLOG, max_count=10, max_wait=3)
        assert in_backlog.session_id is None and in_backlog.partition_key is None
        assert in_backlog.scheduled_enqueue_time_utc is None
        assert in_backlog.time_to_live is None or in_backlog.time_to_live > timedelta(days=365)
        props = in_backlog.application_properties or {}
        assert props[ALIAS_PATH.encode()] == b"orders"
        assert props[ALIAS_SESSION_ID.encode()] == b"sess-9"
        assert props[ALIAS_PARTITION_KEY.encode()] == b"sess-9"
        assert props[ALIAS_TIME_TO_LIVE.encode()] == 600.0
        assert props[ALIAS_SCHEDULED_ENQUEUE_TIME.encode()] == int(scheduled.timestamp() * 1000)
        # When the syphon restores it one second later and sends it to the primary
        restored = from_backlog_message(in_backlog, time.time() + 1)
        assert isinstance(restored, RestoredMessage) and restored.destination == "orders"
        assert restored.fields.application_properties == PROPERTIES  # exact Python types restored
        assert restored.fields.time_to_live is not None and 590 < restored.fields.time_to_live < 600
        assert pool.send("primary", restored.destination, [restored.message]).accepted == [0]
        pool.queues.complete("secondary", BACKLOG, in_backlog)
    # Then the primary receives the original message with the remaining TTL, and the backlog is empty
    (got,) = drain(primary, "orders", 1, max_wait=6)
    assert (got.message_id, body_of(got), got.session_id, got.partition_key) == (
        "m-1",
        b"\x01body",
        "sess-9",
        "sess-9",
    )
    assert got.scheduled_enqueue_time_utc == scheduled
    assert got.time_to_live is not None and timedelta(seconds=590) < got.time_to_live < timedelta(seconds=600)
    assert (got.content_type, got.correlation_id, got.subject, got.reply_to, got.to) == (
        "application/json",
        "c-1",
        "s",
        "r",
        "t",
    )
    received = got.application_properties or {}
    assert set(received) == {name.encode() for name in PROPERTIES}  # no alias or type mark left
    assert received[b"raw"] == b"\x00\xff" and received[b"big"] == 2**40
    assert drain(secondary, BACKLOG, 1, max_wait=0.5) == []


def test_expired_and_foreign_backlog_messages_are_decisions(
    namespace_pair: tuple[LocalNamespace, LocalNamespace],
) -> None:
    primary, secondary = namespace_pair
    short = Envelope(
        entity="orders", message_id="short", body=b"x", accepted_at=time.time(), time_to_live=1.0
    )
    aliased = to_backlog_message(short)
    assert isinstance(aliased, BacklogMessage)
    foreign = to_message(Envelope(entity=BACKLOG, message_id="foreign", body=b"y", accepted_at=time.time()))
    with pool_for(primary, secondary) as pool:
        assert pool.send("secondary", BACKLOG, [aliased.message, foreign]).accepted == [0, 1]
        got = pool.queues.receive_batch("secondary", BACKLOG, max_count=10, max_wait=3)
        assert [m.message_id for m in got] == ["short", "foreign"]
        # Given the short TTL ran out while it waited in the backlog
        expired = from_backlog_message(got[0], time.time() + 2)
        assert isinstance(expired, ExpiredInBacklog) and expired.destination == "orders"
        # A message nobody aliased cannot be restored
        not_aliased = from_backlog_message(got[1], time.time())
        assert isinstance(not_aliased, NotAliased) and "x-ms-path" in not_aliased.reason
        # The syphon dead-letters both with the decision's reason
        pool.queues.dead_letter("secondary", BACKLOG, got[0], expired.reason)
        pool.queues.dead_letter("secondary", BACKLOG, got[1], not_aliased.reason)
    dead = drain(secondary, f"{BACKLOG}/$deadletterqueue", 2)
    assert [m.dead_letter_reason for m in dead] == [expired.reason, not_aliased.reason]
