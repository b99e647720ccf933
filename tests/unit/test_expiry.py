"""The TTL a send from the outbox carries, counted from acceptance (``bridge.core.expiry``), and the
settle plan of an expired entry. Pure: no Redis, no namespace."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bridge.core.decisions import DeadLetter
from bridge.core.expiry import (
    BUILT_TTL_SLACK,
    EXPIRED_BEFORE_DELIVERY,
    Expired,
    Live,
    built_ttl_holds,
    delivery_ttl,
)
from bridge.core.settle import DeadLetterEntry, plan_settlement

ACCEPTED = 1_000_000.0


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


@pytest.mark.parametrize(
    ("ttl", "scheduled", "now", "expected"),
    [
        # no TTL: nothing to count
        (None, None, ACCEPTED + 600, Live(None)),
        # sent at once: the full TTL
        (60.0, None, ACCEPTED, Live(60.0)),
        # 20 s in the outbox: 40 s left
        (60.0, None, ACCEPTED + 20, Live(40.0)),
        # a ten-minute outage: expired at acceptance + TTL
        (60.0, None, ACCEPTED + 600, Expired(ACCEPTED + 60, 60.0)),
        # exactly used up, and less than Service Bus's millisecond left: expired
        (60.0, None, ACCEPTED + 60, Expired(ACCEPTED + 60, 60.0)),
        (60.0, None, ACCEPTED + 59.9995, Expired(ACCEPTED + 60, 60.0)),
        # a worker clock behind the ingress host's: never more than the TTL given
        (60.0, None, ACCEPTED - 30, Live(60.0)),
        # scheduled later than the send: Service Bus counts from the scheduled time, the full TTL goes
        (60.0, ACCEPTED + 3600, ACCEPTED + 600, Live(60.0)),
        # scheduled time passed in the outbox: counted from the scheduled time
        (60.0, ACCEPTED + 100, ACCEPTED + 130, Live(30.0)),
        (60.0, ACCEPTED + 100, ACCEPTED + 200, Expired(ACCEPTED + 160, 60.0)),
        # scheduled before acceptance (already due): counted from acceptance
        (60.0, ACCEPTED - 500, ACCEPTED + 10, Live(50.0)),
    ],
)
def test_the_ttl_a_send_carries_counts_from_acceptance_or_the_later_scheduled_time(
    ttl: float | None, scheduled: float | None, now: float, expected: Live | Expired
) -> None:
    got = delivery_ttl(ttl, ACCEPTED, None if scheduled is None else _at(scheduled), now)
    if isinstance(expected, Live) and expected.time_to_live is not None:
        assert isinstance(got, Live)
        assert got.time_to_live == pytest.approx(expected.time_to_live)
    else:
        assert got == expected


@pytest.mark.parametrize(
    ("built", "left", "holds"),
    [
        # no TTL then, none now
        (None, None, True),
        # built just before the send: what it carries is what is left
        (40.0, 40.0, True),
        (40.0, 40.0 - BUILT_TTL_SLACK, True),
        # built while the batch before took longer: the message would outlive its TTL, build it again
        (40.0, 40.0 - BUILT_TTL_SLACK - 0.001, False),
        (60.0, 45.0, False),
        # a TTL that came out shorter is never a longer life
        (39.0, 40.0, True),
        # not the same message's TTL
        (None, 40.0, False),
        (40.0, None, False),
    ],
)
def test_a_message_built_ahead_goes_only_while_its_ttl_is_still_what_is_left(
    built: float | None, left: float | None, holds: bool
) -> None:
    assert built_ttl_holds(built, left) is holds


def test_the_expiry_reason_names_the_code_the_ttl_and_when_it_ended() -> None:
    expired = delivery_ttl(2.0, ACCEPTED, None, ACCEPTED + 5)
    assert isinstance(expired, Expired)
    assert expired.reason == f"{EXPIRED_BEFORE_DELIVERY}: TTL of 2s ended at {ACCEPTED + 2:.3f}"


def test_an_expired_entry_is_planned_for_the_dead_letter_stream_with_its_code() -> None:
    expired = DeadLetter("expired_before_delivery: TTL of 2s ended", code=EXPIRED_BEFORE_DELIVERY)
    refused = DeadLetter("message_permanent on primary: too big")
    plan = plan_settlement(
        [expired, refused], ["entry:1", "entry:2"], held=(), waits={}, own_waits=(), entity="e", now=1.0
    )
    assert plan.fates == (
        DeadLetterEntry(expired.reason, EXPIRED_BEFORE_DELIVERY),
        DeadLetterEntry(refused.reason, "message_permanent"),
    )
    assert plan.stop is None and not plan.behind
