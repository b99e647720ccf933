"""The provisioning plan as tables: what is created, what exists, what differs, what is extra (no network)."""

from __future__ import annotations

import ast
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from bridge.core import provisioning
from bridge.core.provisioning import (
    BACKLOG_QUEUE,
    INT_MAX,
    TIMESPAN_MAX,
    Difference,
    Provision,
    QueueDescription,
    differences,
    entity_queue_description,
    format_value,
    is_at_max,
    matches,
    plan,
    plan_backlog_queues,
)

# What the SDK reads back for "P10675199DT2H48M5.4775807S" (rounded up by a microsecond).
SDK_MAX = timedelta(days=10675199, seconds=10085, microseconds=477581)


def backlog_as_read(**changes: object) -> dict[str, object]:
    """A backlog queue's fields as the SDK reports them after a correct create."""
    fields: dict[str, object] = {
        "max_size_in_megabytes": 5120,
        "max_delivery_count": INT_MAX,
        "default_message_time_to_live": SDK_MAX,
        "auto_delete_on_idle": SDK_MAX,
        "lock_duration": timedelta(seconds=60),
        "dead_lettering_on_message_expiration": True,
        "enable_batched_operations": True,
        "requires_session": False,
        "max_message_size_in_kilobytes": 256,
    }
    fields.update(changes)
    return fields


def test_backlog_description_is_what_the_dotnet_pairing_created() -> None:
    assert BACKLOG_QUEUE.options() == {
        "max_size_in_megabytes": 5120,
        "max_delivery_count": 2_147_483_647,
        "default_message_time_to_live": TIMESPAN_MAX,
        "auto_delete_on_idle": TIMESPAN_MAX,
        "lock_duration": timedelta(minutes=1),
        "dead_lettering_on_message_expiration": True,
        "enable_batched_operations": True,
    }
    # TimeSpan.MaxValue is 10675199.02:48:05.4775807 (ticks truncated to microseconds)
    assert TIMESPAN_MAX.days == 10675199 and TIMESPAN_MAX.seconds == 2 * 3600 + 48 * 60 + 5
    assert TIMESPAN_MAX.microseconds == 477580


@pytest.mark.parametrize(
    ("field", "wanted", "actual", "ok"),
    [
        ("auto_delete_on_idle", TIMESPAN_MAX, SDK_MAX, True),
        ("auto_delete_on_idle", TIMESPAN_MAX, TIMESPAN_MAX - timedelta(microseconds=900), True),
        ("auto_delete_on_idle", TIMESPAN_MAX, timedelta(days=14), False),
        ("auto_delete_on_idle", TIMESPAN_MAX, None, False),
        ("lock_duration", timedelta(minutes=1), timedelta(seconds=60), True),
        ("lock_duration", timedelta(minutes=1), timedelta(seconds=30), False),
        ("max_delivery_count", INT_MAX, 10, False),
        ("dead_lettering_on_message_expiration", True, False, False),
        ("max_message_size_in_kilobytes", 1024, 2048, True),
        ("max_message_size_in_kilobytes", 1024, 256, False),
        ("max_message_size_in_kilobytes", 1024, None, False),
        ("requires_session", False, None, False),
    ],
)
def test_matches(field: str, wanted: object, actual: object, ok: bool) -> None:
    assert matches(field, wanted, actual) is ok


def test_fresh_namespace_creates_every_backlog_queue_in_order() -> None:
    decisions = plan_backlog_queues("contoso", 3, {})
    assert [(d.name, d.action) for d in decisions] == [
        ("contoso/x-servicebus-transfer/0", "create"),
        ("contoso/x-servicebus-transfer/1", "create"),
        ("contoso/x-servicebus-transfer/2", "create"),
    ]
    assert all(d.description == BACKLOG_QUEUE for d in decisions)


def test_existing_differing_and_extra_backlog_queues() -> None:
    # Given /7 exists as provisioned, /3 with a 30 s lock, /12 beyond count 10, another primary's /0,
    # an unrelated queue, and a name that only looks like a backlog queue
    existing = {
        "contoso/x-servicebus-transfer/7": backlog_as_read(),
        "contoso/x-servicebus-transfer/3": backlog_as_read(lock_duration=timedelta(seconds=30)),
        "contoso/x-servicebus-transfer/12": backlog_as_read(),
        "fabrikam/x-servicebus-transfer/0": backlog_as_read(),
        "orders": {},
        "contoso/x-servicebus-transfer/abc": {},
    }
    # When the plan is made for count 10
    decisions = {d.name: d for d in plan_backlog_queues("contoso", 10, existing)}
    # Then /7 exists, /3 differs in its lock duration only, /12 is extra; nothing else is touched
    assert decisions["contoso/x-servicebus-transfer/7"].action == "exists"
    assert decisions["contoso/x-servicebus-transfer/3"] == Provision(
        "contoso/x-servicebus-transfer/3",
        "differs",
        BACKLOG_QUEUE,
        (Difference("lock_duration", timedelta(minutes=1), timedelta(seconds=30)),),
    )
    assert decisions["contoso/x-servicebus-transfer/12"] == Provision(
        "contoso/x-servicebus-transfer/12", "extra"
    )
    assert {"fabrikam/x-servicebus-transfer/0", "orders", "contoso/x-servicebus-transfer/abc"}.isdisjoint(
        decisions
    )
    actions = Counter(d.action for d in decisions.values())
    assert actions == {"exists": 1, "create": 8, "differs": 1, "extra": 1}


def test_extras_are_ordered_by_index_and_never_planned_for_anything_else() -> None:
    existing = {f"contoso/x-servicebus-transfer/{i}": backlog_as_read() for i in (20, 5, 11, 0)}
    decisions = plan_backlog_queues("contoso", 2, existing)
    assert [(d.name.rsplit("/", 1)[1], d.action) for d in decisions] == [
        ("0", "exists"),
        ("1", "create"),
        ("5", "extra"),
        ("11", "extra"),
        ("20", "extra"),
    ]
    assert {d.action for d in decisions} <= {"exists", "create", "differs", "extra"}


def test_names_match_case_insensitively() -> None:
    existing = {"Contoso/X-ServiceBus-Transfer/0": backlog_as_read(), "CONTOSO/x-servicebus-transfer/4": {}}
    decisions = plan_backlog_queues("contoso", 1, existing)
    assert [(d.name, d.action) for d in decisions] == [
        ("contoso/x-servicebus-transfer/0", "exists"),
        ("CONTOSO/x-servicebus-transfer/4", "extra"),
    ]


def test_every_differing_field_is_listed() -> None:
    observed = backlog_as_read(
        max_delivery_count=10, auto_delete_on_idle=timedelta(days=7), enable_batched_operations=False
    )
    (decision,) = plan_backlog_queues("contoso", 1, {"contoso/x-servicebus-transfer/0": observed})
    assert decision.action == "differs"
    assert [d.field for d in decision.differences] == [
        "max_delivery_count",
        "auto_delete_on_idle",
        "enable_batched_operations",
    ]


@pytest.mark.parametrize(
    ("session", "dedup", "size", "options"),
    [
        (False, False, 256 * 1024, {"requires_session": False, "requires_duplicate_detection": False}),
        (True, True, 1000, {"requires_session": True, "requires_duplicate_detection": True}),
        (
            False,
            False,
            1024 * 1024 + 1,
            {
                "requires_session": False,
                "requires_duplicate_detection": False,
                "max_message_size_in_kilobytes": 1025,
            },
        ),
    ],
)
def test_entity_description_from_settings(
    session: bool, dedup: bool, size: int, options: dict[str, object]
) -> None:
    description = entity_queue_description(
        requires_session=session, requires_duplicate_detection=dedup, max_message_size=size
    )
    assert description.options() == options


def test_generic_plan_without_extras_reports_no_extras() -> None:
    desired = {"orders": QueueDescription(requires_session=True)}
    existing = {"orders": {"requires_session": False}, "other": {}}
    (decision,) = plan(desired, existing)
    assert decision.action == "differs"
    assert decision.differences == (Difference("requires_session", True, False),)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (timedelta(minutes=1), "PT1M"),
        (timedelta(days=14), "P14D"),
        (timedelta(days=1, hours=2, seconds=3.5), "P1DT2H3.5S"),
        (timedelta(0), "PT0S"),
        (SDK_MAX, "max"),
        (5120, 5120),
        (None, None),
    ],
)
def test_format_value(value: object, shown: object) -> None:
    assert format_value(value) == shown
    assert is_at_max(value) is (shown == "max")


def test_planning_module_is_pure() -> None:
    tree = ast.parse(Path(provisioning.__file__).read_text())
    imported = {
        (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not imported & {"azure", "redis", "celery", "time", "asyncio", "httpx", "requests"}
    assert len(Path(provisioning.__file__).read_text().splitlines()) < 400


def test_a_duration_at_the_maximum_less_the_tolerance_still_reads_as_never() -> None:
    assert is_at_max(TIMESPAN_MAX - timedelta(milliseconds=1)) is True
    assert is_at_max(TIMESPAN_MAX - timedelta(milliseconds=2)) is False


def test_a_message_size_limit_at_or_above_the_wanted_one_is_no_difference() -> None:
    wanted = QueueDescription(max_message_size_in_kilobytes=1024)

    assert differences(wanted, {"max_message_size_in_kilobytes": 1024}) == ()
    assert differences(wanted, {"max_message_size_in_kilobytes": 2048}) == ()
    assert differences(wanted, {"max_message_size_in_kilobytes": 256}) == (
        Difference("max_message_size_in_kilobytes", 1024, 256),
    )


def test_whole_seconds_are_written_without_a_decimal_point() -> None:
    assert format_value(timedelta(seconds=62)) == "PT1M2S"
