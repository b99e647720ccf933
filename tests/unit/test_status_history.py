"""The status page's history and summary as tables: slots, rates, percentiles, gaps, bands, the summary
line and the error list."""

from __future__ import annotations

import pytest

from bridge.core.health import (
    EntityHealth,
    ErrorSeen,
    RoleHealth,
    duration,
    error_code,
    error_digest,
    summary_level,
    summary_parts,
)
from bridge.core.history import (
    LATENCY_BOUNDS,
    EntitySample,
    Sample,
    entry_age,
    histogram_delta,
    latency_bucket,
    latency_counts,
    quantile,
    rate,
    slot_of,
    state_bands,
    trend,
    window_start,
)
from bridge.core.history_series import build_series
from bridge.core.series import Band
from bridge.errors import ConfigurationError
from bridge.settings import load_settings
from bridge.status.health_view import health_view, redis_problem

BUCKETS = len(LATENCY_BOUNDS) + 1


def _latency(**counts: int) -> tuple[int, ...]:
    """A histogram with ``b<i>=n`` in bucket i."""
    out = [0] * BUCKETS
    for name, n in counts.items():
        out[int(name[1:])] = n
    return tuple(out)


def _entity(
    accepted: int = 0, sent: int = 0, active: str = "primary", backlog: bool = False, **kw: object
) -> EntitySample:
    up = kw.pop("up", {"primary": True, "secondary": True})
    latency = kw.pop("latency", _latency())
    return EntitySample(
        accepted=accepted,
        sent=sent,
        handled=int(kw.pop("handled", 0)),  # type: ignore[call-overload]
        depth=int(kw.pop("depth", 0)),  # type: ignore[call-overload]
        oldest_age=float(kw.pop("oldest_age", 0.0)),  # type: ignore[arg-type]
        latency=latency,  # type: ignore[arg-type]
        active=active,
        backlog=backlog,
        up=up,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("now", "interval", "slot"),
    [(0.0, 5.0, 0), (4.999, 5.0, 0), (5.0, 5.0, 1), (1_700_000_003.0, 5.0, 340_000_000), (1.26, 0.5, 2)],
)
def test_slot_of(now: float, interval: float, slot: int) -> None:
    assert slot_of(now, interval) == slot


@pytest.mark.parametrize(
    ("seconds", "bucket"),
    [
        (0.0, 0),
        (0.01, 0),
        (0.011, 1),
        (1.0, 6),
        (3600.0, len(LATENCY_BOUNDS) - 1),
        (3601.0, len(LATENCY_BOUNDS)),
    ],
)
def test_latency_bucket(seconds: float, bucket: int) -> None:
    assert latency_bucket(seconds) == bucket


def test_entry_ages_count_into_buckets() -> None:
    # Given outbox entry ids written 5 ms, 300 ms and 2 s before now, and one that is not a stream id
    now = 1000.0
    ages = [entry_age(i, now) for i in ("999995-0", "999700-3", "998000-0", "bogus")]
    # Then their ages are known but for the bogus one, and each lands in its bucket
    assert ages[:3] == pytest.approx([0.005, 0.3, 2.0]) and ages[3] is None
    assert latency_counts(ages) == {0: 1, 5: 1, 7: 1}
    # an unknown age is skipped, not the end of the count; two in one bucket count two
    assert latency_counts([None, 0.3, 0.4]) == {5: 2}


def test_the_window_keeps_the_samples_of_its_last_seconds() -> None:
    assert window_start(1000.0, 3600.0) == -2600.0
    assert window_start(5000.0, 60.0) == 4940.0


@pytest.mark.parametrize(
    ("before", "after", "seconds", "expected"),
    [
        (10, 20, 5.0, 2.0),
        (10, 10, 5.0, 0.0),
        (100, 4, 2.0, 2.0),  # reset (Redis restarted without its data): what is there is new
        (None, 4, 2.0, None),
        (4, None, 2.0, None),
        (1, 2, 0.0, None),
        (0, 3, 0.5, 6.0),  # samples closer than a second apart
    ],
)
def test_rate(before: int | None, after: int | None, seconds: float, expected: float | None) -> None:
    assert rate(before, after, seconds) == expected


@pytest.mark.parametrize(
    ("q", "counts", "expected"),
    [
        (0.5, _latency(), None),
        (0.5, _latency(b0=10), 0.005),  # half way into [0, 0.01]
        (0.5, _latency(b1=1), 0.0175),  # one observation: half way into (0.01, 0.025]
        (0.5, _latency(b0=5, b2=5), 0.01),  # the 5th of 10 ends bucket 0
        (0.99, _latency(b0=99, b3=1), 0.01),
        (0.99, _latency(b0=98, b3=2), 0.075),  # half way into (0.05, 0.1]
        (0.5, _latency(**{f"b{len(LATENCY_BOUNDS)}": 3}), LATENCY_BOUNDS[-1]),  # above every bound
    ],
)
def test_quantile(q: float, counts: tuple[int, ...], expected: float | None) -> None:
    assert quantile(q, counts) == (None if expected is None else pytest.approx(expected))


def test_histogram_delta_takes_a_shrunk_bucket_as_reset() -> None:
    assert histogram_delta((1, 5, 2), (3, 5, 1, 4)) == [2, 0, 1, 4]
    # a bucket the later histogram lacks counts nothing new
    assert histogram_delta((1, 2, 3), (2, 2)) == [1, 0, 0]


@pytest.mark.parametrize(
    ("values", "arrow"),
    [
        ([1, 2, 3], "\u2191"),
        ([3, None, 1], "\u2193"),
        ([2, 5, 2], "\u2192"),
        ([7], "\u2192"),
        ([None, 4, 9], "\u2191"),
        ([1, 0, 3], "\u2191"),  # first to last, whatever came between
    ],
)
def test_trend(values: list[float | None], arrow: str) -> None:
    assert trend(values) == arrow


def test_state_bands_close_at_the_next_sample_or_at_the_end() -> None:
    times = [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    flags = [False, True, True, False, True, True]
    assert state_bands("outage", "primary down", times, flags, 30.0) == [
        Band("outage", "primary down", 5.0, 15.0),
        Band("outage", "primary down", 20.0, 30.0),
    ]


def test_a_sample_survives_its_json_form() -> None:
    sample = Sample(
        at=10.0,
        entities={
            "orders": _entity(7, 3, "secondary", depth=4, latency=_latency(b1=2), up={"primary": False})
        },
        redis={"used_memory": 1e6, "maxmemory": 0.0, "aof_ok": 1.0},
    )
    assert Sample.from_json(sample.as_json()) == sample


def test_every_field_of_a_sample_survives_its_json_form() -> None:
    # Given an entity with every counter and gauge set, and no Redis figures
    sample = Sample(
        at=20.0,
        entities={"p": _entity(3, 2, "primary", True, handled=9, depth=1, oldest_age=1.23456)},
    )
    back = Sample.from_json(sample.as_json())
    # Then each comes back (the oldest age to the millisecond) and Redis stays unknown
    assert back.entities["p"] == _entity(3, 2, "primary", True, handled=9, depth=1, oldest_age=1.235)
    assert back.redis is None


def test_a_stored_sample_missing_fields_reads_as_zeros_on_the_primary() -> None:
    # Given a sample whose entity holds none of the fields (a sample of an older release), and one with no
    # entities at all
    sparse = Sample.from_json({"t": 5, "e": {"p": {}}})
    # Then every counter and gauge reads as nothing happened, on the primary, no namespace known
    assert sparse == Sample(
        5.0,
        {
            "p": EntitySample(
                accepted=None,
                sent=0,
                handled=0,
                depth=0,
                oldest_age=0.0,
                latency=(),
                active="primary",
                backlog=False,
                up={},
            )
        },
    )
    assert Sample.from_json({"t": 7}) == Sample(7.0, {})


def _outage_story() -> list[Sample]:
    """orders: healthy at 0 and 5; the primary down at 10 (swapped), a missed slot at 15 and 20, back on the
    primary at 25; 10 messages accepted per slot, the sends stop while the primary is down."""
    up, down = {"primary": True, "secondary": True}, {"primary": False, "secondary": True}
    rows = [
        (0.0, 0, 0, "primary", up, _latency()),
        (5.0, 10, 10, "primary", up, _latency(b2=10)),
        (10.0, 20, 10, "secondary", down, _latency(b2=10)),
        (25.0, 50, 50, "primary", up, _latency(b2=10, b6=40)),
    ]
    return [
        Sample(at, {"orders": _entity(acc, sent, active, up=ups, latency=lat, depth=acc - sent)})
        for at, acc, sent, active, ups, lat in rows
    ]


def test_series_hold_rates_percentiles_gaps_and_bands() -> None:
    series = build_series(list(reversed(_outage_story())), 5.0, {"primary": "sb-east"})
    # A missed stretch longer than 2.5 intervals is one row of nulls, one interval after the last sample
    assert series["times"] == [0.0, 5.0, 10.0, 15.0, 25.0]
    orders = series["entities"]["orders"]
    assert orders["accepted"] == [None, 2.0, 2.0, None, 2.0]
    assert orders["sent"] == [None, 2.0, 0.0, None, pytest.approx(40 / 15)]
    assert orders["depth"] == [0.0, 0.0, 10.0, None, 0.0]
    assert orders["latency_p50"][1] == pytest.approx(0.0375) and orders["latency_p50"][2] is None
    assert orders["latency_p99"][4] == pytest.approx(0.5 + 0.5 * (39.6 / 40))
    assert orders["failovers"] == [0.0, 0.0, 1.0, None, 1.0]
    assert series["namespaces"]["primary"] == [1.0, 1.0, 0.0, None, 1.0]
    assert series["bands"] == [
        {"kind": "outage", "label": "primary (sb-east) down", "start": 10.0, "end": 25.0},
        {"kind": "failover", "label": "orders on secondary", "start": 10.0, "end": 25.0},
    ]


def test_a_failover_still_on_at_the_last_sample_is_a_band_to_the_next_slot() -> None:
    samples = [Sample(0.0, {"p": _entity()}), Sample(5.0, {"p": _entity(backlog=True)})]
    assert build_series(samples, 5.0)["bands"] == [
        {"kind": "failover", "label": "p in backlog", "start": 5.0, "end": 10.0}
    ]


def test_series_of_an_entity_seen_late_and_of_redis_known_early() -> None:
    # Given orders sampled twice (10 messages handled in between, its oldest entry 3 s old), payments only
    # the second time with its primary down, and Redis's figures only the first time
    redis = {"used_memory": 100.0, "maxmemory": 0.0, "aof_ok": 1.0}
    up, primary_down = {"primary": True, "secondary": True}, {"primary": False, "secondary": True}
    samples = [
        Sample(0.0, {"orders": _entity()}, redis=redis),
        Sample(
            5.0,
            {"orders": _entity(handled=10, oldest_age=3.0, up=up), "payments": _entity(up=primary_down)},
        ),
    ]
    series = build_series(samples, 5.0)
    # Then each entity's line has a value per row (none before it was first seen)
    orders, payments = series["entities"]["orders"], series["entities"]["payments"]
    assert orders["handled"] == [None, 2.0] and orders["oldest_age"] == [0.0, 3.0]
    assert payments["depth"] == [None, 0.0] and payments["handled"] == [None, None]
    # And a namespace's availability is the share of the entities that see it up
    assert series["namespaces"] == {"primary": [1.0, 0.5], "secondary": [1.0, 1.0]}
    # And Redis's lines break where its figures are unknown
    assert series["redis"] == {"used_memory": [100.0, None], "maxmemory": [0.0, None], "aof_ok": [1.0, None]}


def test_failovers_count_each_move_off_the_primary_and_a_band_still_open_ends_a_slot_later() -> None:
    # Given payments failing over twice, the second time still on at the last sample, with its secondary
    # down meanwhile (a namespace whose name is not known)
    both, secondary_down = {"primary": True, "secondary": True}, {"primary": True, "secondary": False}
    rows = [("primary", both), ("secondary", both), ("primary", both), ("secondary", secondary_down)]
    samples = [
        Sample(5.0 * i, {"payments": _entity(active=active, up=up)}) for i, (active, up) in enumerate(rows)
    ]
    series = build_series(samples, 5.0, {"primary": "sb-east"})
    # Then both failovers count, and the bands open at the last sample end one interval after it
    assert series["interval"] == 5.0
    assert series["entities"]["payments"]["failovers"] == [0.0, 1.0, 1.0, 2.0]
    assert series["bands"] == [
        {"kind": "outage", "label": "secondary down", "start": 15.0, "end": 20.0},
        {"kind": "failover", "label": "payments on secondary", "start": 5.0, "end": 10.0},
        {"kind": "failover", "label": "payments on secondary", "start": 15.0, "end": 20.0},
    ]


def test_a_namespace_no_entity_uses_has_no_availability() -> None:
    series = build_series([Sample(0.0, {"p": _entity(up={"primary": True})})], 5.0)
    assert series["namespaces"] == {"primary": [1.0], "secondary": [None]}


def test_samples_exactly_the_gap_factor_apart_have_no_gap_between_them() -> None:
    samples = [Sample(0.0, {"p": _entity()}), Sample(12.5, {"p": _entity()})]
    assert build_series(samples, 5.0)["times"] == [0.0, 12.5]


def test_no_samples_no_series() -> None:
    series = build_series([], 5.0)
    assert series["times"] == [] and series["entities"] == {} and series["bands"] == []


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "0 s"),
        (38.9, "38 s"),
        (119, "119 s"),
        (120, "2 min 0 s"),
        (250, "4 min 10 s"),
        (7199, "119 min 59 s"),
        (7200, "2 h 0 min"),
        (7500, "2 h 5 min"),
        (10_800, "3 h 0 min"),
    ],
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_the_summary_reads_like_an_incident() -> None:
    roles = [RoleHealth("primary", "sb-east", 62.0), RoleHealth("secondary", "sb-west", None)]
    entities = [EntityHealth("orders", "secondary", False), EntityHealth("payments", "secondary", True)]
    parts = summary_parts(100.0, roles, entities, [120.0, None, 170.0])
    assert parts == [
        "primary (sb-east) DOWN for 38 s",
        "orders on secondary",
        "payments in backlog",
        "outbox 170 \u2191",
    ]
    assert summary_level(roles, entities, None) == "degraded"


@pytest.mark.parametrize(
    ("roles", "entities", "problem", "parts", "level"),
    [
        (
            [RoleHealth("primary", None, None)],
            [EntityHealth("o", "primary", False)],
            None,
            ["all healthy"],
            "ok",
        ),
        (
            [RoleHealth("primary", "a", 0.0), RoleHealth("secondary", "b", 5.0)],
            [],
            None,
            ["primary (a) DOWN for 10 s", "secondary (b) DOWN for 5 s"],
            "down",
        ),
        ([], [EntityHealth("o", "primary", False, 1)], None, ["o restore barrier lost"], "degraded"),
        # a paired entity in its backlog keeps the primary as its active role
        ([], [EntityHealth("p", "primary", True)], None, ["p in backlog"], "degraded"),
        ([], [], "Redis AOF off", ["Redis AOF off"], "degraded"),
    ],
)
def test_summary_table(
    roles: list[RoleHealth], entities: list[EntityHealth], problem: str | None, parts: list[str], level: str
) -> None:
    assert summary_parts(10.0, roles, entities, [3.0, 3.0], problem) == [*parts, "outbox 3 \u2192"]
    assert summary_level(roles, entities, problem) == level


@pytest.mark.parametrize(
    ("text", "error_class", "code"),
    [
        ("NamespaceRefusedError: connection refused", "outage", "NamespaceRefusedError"),
        ("ServiceBusError", None, "ServiceBusError"),
        ("primary failing for 31s: timeout", "outage", "outage"),
        ("no reason given", None, "error"),
    ],
)
def test_error_code(text: str, error_class: str | None, code: str) -> None:
    assert error_code(text, error_class) == code


def test_a_namespace_without_a_known_name_is_named_by_its_role() -> None:
    parts = summary_parts(10.0, [RoleHealth("secondary", None, 4.0)], [], [])
    assert parts == ["secondary DOWN for 6 s", "outbox 0 \u2192"]


def test_open_errors_come_newest_first_with_their_text_and_failure_class() -> None:
    seen = [
        ErrorSeen("primary", "orders", "timed out after 30 s", 10.0, error_class="outage"),
        ErrorSeen("secondary", "orders", "EndpointRefusedError: x", 20.0),
    ]
    digest = error_digest(seen)
    assert [(e["code"], e["text"], e["last_at"]) for e in digest] == [
        ("EndpointRefusedError", "EndpointRefusedError: x", 20.0),
        ("outage", "timed out after 30 s", 10.0),
    ]


def test_an_error_seen_by_two_entities_is_listed_once_and_resolved_when_both_saw_it_back() -> None:
    text = "NamespaceRefusedError: refused"
    seen = [
        ErrorSeen("primary", "payments", text, 12.0, resolved_at=30.0, trace_id="t2"),
        ErrorSeen("primary", "orders", text, 10.0, resolved_at=None, trace_id="t1", trace_url="http://j/t1"),
        ErrorSeen("secondary", "orders", "EndpointRefusedError: x", 20.0, resolved_at=25.0),
    ]
    digest = error_digest(seen)
    assert [(e["role"], e["entities"], e["resolved"]) for e in digest] == [
        ("primary", ["orders", "payments"], False),
        ("secondary", ["orders"], True),
    ]
    assert digest[0]["first_at"] == 10.0 and digest[0]["last_at"] == 12.0 and digest[0]["resolved_at"] is None
    assert digest[0]["traces"] == [
        {"entity": "orders", "trace_id": "t1", "trace_url": "http://j/t1"},
        {"entity": "payments", "trace_id": "t2", "trace_url": None},
    ]
    assert digest[1]["resolved_at"] == 25.0 and digest[1]["code"] == "EndpointRefusedError"
    # When orders sees the primary back too, the primary's error is resolved at the later of the two
    seen[1] = ErrorSeen("primary", "orders", text, 10.0, resolved_at=40.0)
    again = {e["role"]: e for e in error_digest(seen)}
    assert again["primary"]["resolved"] is True and again["primary"]["resolved_at"] == 40.0


def test_history_settings_bound_the_samples() -> None:
    settings = load_settings()
    assert settings.status_history.samples == 721  # an hour at 5 s, both ends
    with pytest.raises(ConfigurationError, match="status_history"):
        load_settings(status_history={"interval": 0.2, "window": 86_400})


def _ns(
    available: bool, since: float | None = None, error: str | None = None, at: float | None = None
) -> dict[str, object]:
    return {
        "available": available,
        "since": since,
        "last_error": error,
        "last_error_at": at,
        "configured": True,
    }


def test_the_health_view_reads_a_paired_failover_from_its_own_times() -> None:
    # Given orders swapped (the primary down since 100) and payments failed over since 90 while its primary
    # health record still says "available since 50" (failover marks it down in the snapshot)
    refused = "NamespaceRefusedError: refused"
    snapshot = {
        "generated_at": 110.0,
        "namespace_names": {"primary": "sb-east", "secondary": "sb-west"},
        "redis": {"aof_enabled": True, "aof_last_write_ok": True, "used_memory": 1, "maxmemory": 0},
        "entities": [
            {
                "name": "orders",
                "active": "secondary",
                "outbox_depth": 3,
                "namespaces": {"primary": _ns(False, 100.0, refused, 100.0), "secondary": _ns(True, 20.0)},
            },
            {
                "name": "payments",
                "active": "secondary",
                "outbox_depth": 2,
                "paired": {
                    "failed_over": True,
                    "failing_since": 90.0,
                    "failed_over_at": 95.0,
                    "barriers": [],
                },
                "namespaces": {
                    "primary": _ns(False, 50.0, refused, 92.0),
                    "secondary": _ns(True, 60.0, "EndpointRefusedError: x", 55.0),
                },
            },
        ],
    }
    recent = [Sample(105.0, {"orders": _entity(depth=1)})]
    view = health_view(snapshot, recent)
    # Then the primary has been down since the paired failover's first failure, and the outbox grows
    assert view["summary"]["parts"] == [
        "primary (sb-east) DOWN for 20 s",
        "orders on secondary",
        "payments in backlog",
        "outbox 5 \u2191",
    ]
    assert view["summary"]["level"] == "degraded"
    # And the refusal both saw is one open error; the secondary's, older than its recovery, is resolved
    errors = {(e["role"], e["code"]): e for e in view["errors"]}
    assert errors["primary", "NamespaceRefusedError"]["entities"] == ["orders", "payments"]
    assert errors["primary", "NamespaceRefusedError"]["resolved"] is False
    assert errors["secondary", "EndpointRefusedError"]["resolved_at"] == 60.0


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        (None, None),
        (
            {"aof_enabled": False, "aof_last_write_ok": True, "used_memory": 1, "maxmemory": 0},
            "Redis AOF off",
        ),
        (
            {"aof_enabled": True, "aof_last_write_ok": False, "used_memory": 1, "maxmemory": 0},
            "Redis AOF write failing",
        ),
        (
            {"aof_enabled": True, "aof_last_write_ok": True, "used_memory": 95, "maxmemory": 100},
            "Redis memory above 90%",
        ),
        ({"aof_enabled": True, "aof_last_write_ok": True, "used_memory": 95, "maxmemory": 0}, None),
    ],
)
def test_redis_problem(server: dict[str, object] | None, problem: str | None) -> None:
    assert redis_problem(server) == problem
