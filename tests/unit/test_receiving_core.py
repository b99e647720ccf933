"""The receiving end's pure decisions (``bridge.core.receiving``, ``received``, ``handler_spec``): tables."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.core.handler_spec import HandlerSpec, parse_handler_spec
from bridge.core.paired import PING_CONTENT_TYPE
from bridge.core.received import ReceivedMessage, json_property
from bridge.core.receiving import (
    MAX_DESCRIPTION_LENGTH,
    Action,
    Claim,
    EventKind,
    ReceiverCounts,
    ReceiverEvent,
    Renewal,
    after_claim,
    after_handler_error,
    count_events,
    dead_letter_reason,
    is_ping,
    last_delivery,
    parse_claims,
    parse_renewals,
    session_order,
)


@pytest.mark.parametrize(
    ("content_type", "ping"),
    [
        (PING_CONTENT_TYPE, True),
        ("application/json", False),
        (None, False),
        ("application/vnd.ms-servicebus-ping; charset=utf-8", False),
    ],
)
def test_only_the_ping_content_type_is_a_ping(content_type: str | None, ping: bool) -> None:
    assert is_ping(content_type) is ping


def test_claim_replies_parse_and_malformed_ones_are_refused() -> None:
    assert parse_claims([0, 1, 2, 3], 4) == [Claim.HANDLE, Claim.DUPLICATE, Claim.BUSY, Claim.FULL]
    with pytest.raises(ValueError, match="3 codes for 2"):
        parse_claims([0, 1, 2], 2)
    with pytest.raises(ValueError, match="not an integer"):
        parse_claims([b"0"], 1)
    with pytest.raises(ValueError):
        parse_claims([7], 1)


def test_renew_replies_parse_and_only_renewed_or_late_marks_are_still_ours() -> None:
    renewals = parse_renewals([0, 1, 2, 3, 4], 5)
    assert renewals == [Renewal.RENEWED, Renewal.LATE, Renewal.TAKEN, Renewal.HANDLED, Renewal.GONE]
    assert [r.lost for r in renewals] == [False, False, True, True, True]
    assert parse_renewals([], 0) == []
    with pytest.raises(ValueError, match="1 codes for 2"):
        parse_renewals([0], 2)
    with pytest.raises(ValueError, match="not an integer"):
        parse_renewals([True], 1)
    with pytest.raises(ValueError):
        parse_renewals([5], 1)


@pytest.mark.parametrize(
    ("claim", "waited", "stopping", "action"),
    [
        (Claim.HANDLE, 0.0, False, Action.HANDLE),
        (Claim.HANDLE, 0.0, True, Action.HANDLE),  # claimed already: finish it even while stopping
        (Claim.DUPLICATE, 0.0, False, Action.COMPLETE),
        (Claim.DUPLICATE, 0.0, True, Action.COMPLETE),
        (Claim.BUSY, 0.0, False, Action.WAIT),
        (Claim.BUSY, 59.9, False, Action.WAIT),
        (Claim.BUSY, 60.0, False, Action.ABANDON),
        (Claim.BUSY, 0.0, True, Action.ABANDON),
        (Claim.FULL, 0.0, False, Action.WAIT),
        (Claim.FULL, 3600.0, False, Action.WAIT),  # back-pressure waits as long as the receiver runs
        (Claim.FULL, 0.0, True, Action.ABANDON),
    ],
)
def test_after_claim(claim: Claim, waited: float, stopping: bool, action: Action) -> None:
    assert after_claim(claim, waited, busy_wait=60.0, stopping=stopping).action is action


@pytest.mark.parametrize(
    ("sequence_numbers", "order"),
    [
        ([], []),
        ([5, 6, 7], [0, 1, 2]),
        # the SDK released 7 between two receives; the broker sent it again behind 8, in the same batch
        ([6, 8, 7, 9], [0, 2, 1, 3]),
        ([9, 7, 7, 8], [1, 2, 3, 0]),  # a copy delivered twice keeps its place (stable)
        ([8, None, 7], [0, 1, 2]),  # a copy without a number: the batch is kept as it came
    ],
)
def test_a_session_batch_is_handed_by_sequence_number(
    sequence_numbers: list[int | None], order: list[int]
) -> None:
    assert session_order(sequence_numbers) == order


@pytest.mark.parametrize(
    ("delivery_count", "max_delivery_count", "last"),
    [
        (0, 10, False),
        (8, 10, False),
        (9, 10, True),
        (12, 10, True),
        (0, 1, True),
        (1, 3, False),
        (2, 3, True),
    ],
)
def test_last_delivery_counts_the_sdk_way(delivery_count: int, max_delivery_count: int, last: bool) -> None:
    # The SDK's delivery_count is 0 on the first delivery; Service Bus dead-letters after max deliveries.
    assert last_delivery(delivery_count, max_delivery_count) is last


def test_a_failure_is_abandoned_until_the_last_delivery_then_dead_lettered_with_the_error() -> None:
    error = ValueError("order 7 has no customer")
    assert after_handler_error(error, 0, 3).action is Action.ABANDON
    assert after_handler_error(error, 1, 3).action is Action.ABANDON
    last = after_handler_error(error, 2, 3)
    assert (last.action, last.reason, last.description) == (
        Action.DEAD_LETTER,
        "ValueError",
        "order 7 has no customer",
    )


def test_dead_letter_reason_is_one_line_short_and_secret_free() -> None:
    error = RuntimeError(
        "cannot reach Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=abc123==\nsecond line "
        + "y" * 5000
    )
    reason, description = dead_letter_reason(error)
    assert reason == "RuntimeError"
    assert "abc123" not in description and "\n" not in description
    assert len(description) == MAX_DESCRIPTION_LENGTH and description.endswith("...")


def test_events_count_into_the_counter_fields() -> None:
    events = [
        ReceiverEvent(EventKind.RECEIVED, "primary", "a"),
        ReceiverEvent(EventKind.RECEIVED, "secondary", "a"),
        ReceiverEvent(EventKind.RECEIVED, "primary", "p"),
        ReceiverEvent(EventKind.HANDLED, "primary", "a"),
        ReceiverEvent(EventKind.DUPLICATE_SUPPRESSED, "secondary", "a"),
        ReceiverEvent(EventKind.PING_DROPPED, "primary", "p"),
        ReceiverEvent(EventKind.HANDLER_ERROR, "primary", "b", "ValueError"),
        ReceiverEvent(EventKind.DEAD_LETTERED, "primary", "b", "ValueError"),
        ReceiverEvent(EventKind.BACKPRESSURE, "primary", "c"),
    ]
    deltas = count_events(events)
    assert deltas == {
        "received_primary": 2,
        "received_secondary": 1,
        "handled": 1,
        "duplicates_suppressed": 1,
        "pings_dropped": 1,
        "handler_errors": 1,
        "dead_lettered": 1,
        "backpressure_waits": 1,
    }
    counts = ReceiverCounts.from_fields({k.encode(): str(v).encode() for k, v in deltas.items()})
    assert counts.as_dict() == {**deltas, "inflight_marks_lost": 0}  # counted by the lock watch, not events
    assert ReceiverCounts.from_fields({b"unknown": b"5"}) == ReceiverCounts()


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("app.handlers:on_order", HandlerSpec("app.handlers", ("on_order",))),
        ("handlers:Orders.handle", HandlerSpec("handlers", ("Orders", "handle"))),
        (" pkg._private.mod:_f ", HandlerSpec("pkg._private.mod", ("_f",))),
    ],
)
def test_handler_specs(text: str, spec: HandlerSpec) -> None:
    assert parse_handler_spec(text) == spec
    assert str(spec) == text.strip()


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("app.handlers.on_order", "must be module:function"),
        (":on_order", "not a dotted module"),
        ("app-handlers:f", "not a dotted module"),
        ("app:", "not a (dotted) attribute"),
        ("app:f(x)", "not a (dotted) attribute"),
        ("app:1f", "not a (dotted) attribute"),
    ],
)
def test_malformed_handler_specs_say_what_is_wrong(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        parse_handler_spec(text)


def test_received_message_json_keeps_every_type() -> None:
    when = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    message = ReceivedMessage(
        message_id="m-1",
        body=b"\x00\xffbody",
        entity="orders",
        namespace="secondary",
        session_id="s-1",
        time_to_live=30.0,
        enqueued_time_utc=when,
        sequence_number=7,
        delivery_count=2,
        application_properties={
            "s": "text",
            "n": 2**40,
            "f": 0.5,
            "b": True,
            "raw": b"\x01",
            "u": uuid.UUID(int=3),
            "t": when,
            "d": timedelta(seconds=90),
        },
    )
    out = message.to_json()
    assert base64.b64decode(out["body_base64"]) == b"\x00\xffbody"
    assert out["session_id"] == "s-1" and out["enqueued_time_utc"] == when.isoformat()
    assert out["delivery_count"] == 2 and "subscription" not in out
    props = out["application_properties"]
    assert props["n"] == {"type": "int", "value": 2**40} and props["b"] == {"type": "bool", "value": True}
    assert props["raw"] == {"type": "bytes", "value": "AQ=="}
    assert props["u"]["value"] == str(uuid.UUID(int=3)) and props["d"] == {"type": "timedelta", "value": 90.0}
    with pytest.raises(UnicodeDecodeError):  # a binary body has no text
        _ = message.text


def test_to_json_names_every_field_a_celery_task_reads() -> None:
    when = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    message = ReceivedMessage(
        message_id="m-1",
        body=b"hi",
        entity="orders",
        namespace="primary",
        subscription="audit",
        content_type="text/plain",
        correlation_id="c-1",
        subject="s",
        reply_to="r",
        to="t",
        session_id="s-1",
        partition_key="p-1",
        time_to_live=30.0,
        scheduled_enqueue_time_utc=when + timedelta(minutes=1),
        enqueued_time_utc=when,
        sequence_number=7,
        backlog_queue="3",
        application_properties={"none": None, "f": 0.5, "s": "x", "t": when},
    )

    assert message.to_json() == {
        "message_id": "m-1",
        "body_base64": "aGk=",
        "entity": "orders",
        "namespace": "primary",
        "subscription": "audit",
        "content_type": "text/plain",
        "correlation_id": "c-1",
        "subject": "s",
        "reply_to": "r",
        "to": "t",
        "session_id": "s-1",
        "partition_key": "p-1",
        "time_to_live": 30.0,
        "scheduled_enqueue_time_utc": "2026-05-01T12:01:00+00:00",
        "enqueued_time_utc": "2026-05-01T12:00:00+00:00",
        "sequence_number": 7,
        "backlog_queue": "3",
        "delivery_count": 0,
        "application_properties": {
            "none": {"type": "null", "value": None},
            "f": {"type": "float", "value": 0.5},
            "s": {"type": "str", "value": "x"},
            "t": {"type": "datetime", "value": "2026-05-01T12:00:00+00:00"},
        },
    }
    assert (
        dict(
            ReceivedMessage(message_id=None, body=b"", entity="e", namespace="primary").application_properties
        )
        == {}
    )


@pytest.mark.parametrize(
    ("value", "form"),
    [
        (uuid.UUID(int=3), {"type": "uuid", "value": "00000000-0000-0000-0000-000000000003"}),
        (-1, {"type": "int", "value": -1}),
        (False, {"type": "bool", "value": False}),
    ],
)
def test_each_property_type_has_its_json_form(value: Any, form: dict[str, Any]) -> None:
    assert json_property(value) == form


def test_a_property_of_another_type_is_named_in_the_error() -> None:
    with pytest.raises(TypeError, match=r"^unsupported application property type list$"):
        json_property([1])  # type: ignore[arg-type]


def test_a_handler_spec_splits_at_its_first_colon() -> None:
    with pytest.raises(ValueError, match=r"'obj:x' is not a \(dotted\) attribute name"):
        parse_handler_spec("pkg.mod:obj:x")


def test_a_dead_letter_description_of_exactly_the_limit_is_kept_whole() -> None:
    text = "x" * MAX_DESCRIPTION_LENGTH

    assert dead_letter_reason(ValueError(text)) == ("ValueError", text)
