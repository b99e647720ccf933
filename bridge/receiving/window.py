"""``DedupWindow``: the MessageIds an entity's receivers handled, shared by every receiver process.

Connection: any blocking client from ``bridge.redis.connection.sync_client`` (single server, Sentinel or
Cluster: every key of a scope shares the entity's hash tag). Driver errors leave as
``StateStoreUnavailableError``.

Layout (``bridge.receiving.keys``): one sorted set per scope, member = MessageId, score = the epoch
millisecond at which it is forgotten; expired members are removed by the next claim (so the bound counts
only live ids). In-flight marks are short-lived strings with a PX expiry, one per id being handled. A
sorted set rather than one key per id: the count that the bound needs is ``ZCARD``, and a member costs
less memory than a key with its own expiry (``docs/receiving.md``, "Window", has the measured bytes per id).

Writing the done marks also counts them (``handled`` in the scope's counters) and journals one ``handled``
event per id new to the window (the entity's journal, ``bridge.journal.keys``; its hash tag is the same),
in the same script call: a done mark never exists without its count and its event, nor the reverse.

The decisions the replies stand for are ``bridge.core.receiving.Claim``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from bridge.core.journal import EventKind, JournalEvent
from bridge.core.receiving import Claim, parse_claims
from bridge.journal import keys as journal_keys
from bridge.receiving import scripts
from bridge.receiving.keys import ReceiverKeys
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import run_script
from bridge.redis.types import SyncRedis


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class DedupWindow:
    """The shared window of one receiving scope; ``owner`` names this process in in-flight marks.

    ``journal_max`` is the journal's ``max_length`` (0: the journal is disabled, ``done`` journals nothing).
    """

    def __init__(
        self,
        client: SyncRedis,
        keys: ReceiverKeys,
        *,
        owner: str,
        window: float,
        max_remembered: int,
        inflight_ttl: float,
        journal_max: int = 0,
    ) -> None:
        self.client = client
        self.keys = keys
        self.owner = owner
        self.window_ms = _ms(window)
        self.max_remembered = max_remembered
        self.inflight_ttl_ms = _ms(inflight_ttl)
        self.journal_max = journal_max

    def claim(self, message_ids: Sequence[str]) -> list[Claim]:
        """One ``Claim`` per id, in order; ids answered ``HANDLE`` now carry this owner's in-flight mark.

        An id that appears twice gets ``HANDLE`` once and ``BUSY`` for the repeat.
        """
        if not message_ids:
            return []
        keys = [self.keys.done, *(self.keys.inflight(m) for m in message_ids)]
        args: list[str | int] = [self.max_remembered, self.inflight_ttl_ms, self.owner, *message_ids]
        with driver_errors():
            reply = run_script(self.client, scripts.CLAIM, keys, args)
        return parse_claims(reply, len(message_ids))

    def done(self, message_ids: Sequence[str], at: float | None = None) -> int:
        """Remember ``message_ids`` as handled for one window, drop this owner's in-flight marks, and count
        and journal (event time ``at``, epoch seconds; default now) the ids new to the window, in one step;
        how many were new.

        Safe to call again after a failure: an id already remembered is not counted or journaled twice.
        """
        if not message_ids:
            return 0
        entity = self.keys.entity
        keys = [
            self.keys.done,
            self.keys.counts,
            journal_keys.journal(entity),
            journal_keys.overflow(entity),
            *(self.keys.inflight(m) for m in message_ids),
        ]
        event = JournalEvent(EventKind.HANDLED, time.time() if at is None else at).encode()
        args: list[str | int] = [
            self.window_ms,
            self.owner,
            self.journal_max,
            len(event),
            *event,
            *message_ids,
        ]
        with driver_errors():
            return int(run_script(self.client, scripts.DONE, keys, args))

    def release(self, message_ids: Sequence[str]) -> None:
        """Drop this owner's in-flight marks of ``message_ids`` (their handler failed: let a copy retry)."""
        if not message_ids:
            return
        with driver_errors():
            run_script(
                self.client, scripts.RELEASE, [self.keys.inflight(m) for m in message_ids], [self.owner]
            )

    def renew(self, message_ids: Sequence[str]) -> int:
        """Extend this owner's in-flight marks (a slow handler); how many were still ours."""
        if not message_ids:
            return 0
        keys = [self.keys.inflight(m) for m in message_ids]
        with driver_errors():
            return int(run_script(self.client, scripts.RENEW, keys, [self.owner, self.inflight_ttl_ms]))

    # ---- observation (status, tests, the benchmark) -----------------------------------------------------
    def remembered(self) -> int:
        """Ids in the window (expired ones not yet removed by a claim included)."""
        with driver_errors():
            return int(self.client.zcard(self.keys.done))

    def is_done(self, message_id: str) -> bool:
        """True while ``message_id`` is remembered as handled (its expiry not yet passed)."""
        with driver_errors():
            score = self.client.zscore(self.keys.done, message_id)
            if score is None:
                return False
            seconds, micros = self.client.time()
        return float(score) > seconds * 1000 + micros // 1000

    def in_flight(self, message_id: str) -> bool:
        """True while some receiver holds ``message_id``'s in-flight mark."""
        with driver_errors():
            return bool(self.client.exists(self.keys.inflight(message_id)))
