"""``DedupWindow``: the MessageIds an entity's receivers handled, shared by every receiver process.

Connection: any blocking client from ``bridge.redis.connection.sync_client`` (single server, Sentinel or
Cluster: every key of a scope shares the entity's hash tag). Driver errors leave as
``StateStoreUnavailableError``.

Layout (``bridge.receiving.keys``, ``bridge.receiving.scripts``): a handled id is remembered as a
fingerprint (``bridge.core.seen``) in small hashes, grouped in time buckets that Redis expires one window
after their span; a lookup checks the few live buckets. The bound counts the ids of live buckets. In-flight
marks are short-lived strings, one per id being handled, naming their owner and their deadline on the
scope's attended clock, which does not run while no receiver reaches Redis (``bridge.receiving.scripts``):
an outage does not age them. Fingerprints in hashes kept in Redis's compact encoding rather than one sorted
set member per id: about a sixth of the memory (``docs/receiving.md``, "Window", has the measured bytes per
id); ``check_compact`` makes sure the server keeps them compact.

Writing the done marks also counts them (``handled`` in the scope's counters) and journals one ``handled``
event per id new to the window (the entity's journal, ``bridge.journal.keys``; its hash tag is the same),
in the same script call: a done mark never exists without its count and its event, nor the reverse.

The decisions the replies stand for are ``bridge.core.receiving.Claim``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from bridge.core.journal import EventKind, JournalEvent
from bridge.core.receiving import Claim, Renewal, parse_claims, parse_renewals
from bridge.core.seen import COMPACT_ENTRIES, FILL, FINGERPRINT_BYTES, fingerprint, span_ms
from bridge.errors import ConfigurationError
from bridge.journal import keys as journal_keys
from bridge.receiving import scripts
from bridge.receiving.keys import ReceiverKeys
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import run_script
from bridge.redis.types import SyncRedis

MARK_KEEP = 24 * 3600.0
"""Seconds an in-flight mark outlives its deadline in Redis (its ``PX``): the longest Redis outage during
which a running handler's mark is kept (an outage does not age it: ``bridge.receiving.scripts``)."""
ATTENDANCE_GAP = 1.0
"""Seconds: a gap longer than this between two scripts of a scope (every receiver process runs one at least
every half second, the lock watch's heartbeat) ages the in-flight marks by this much only."""


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


@dataclass(frozen=True)
class Remembered:
    """What ``done`` did: how many ids were new to the window, and the ids whose in-flight mark was
    another receiver's (this owner had lost it while the handler ran)."""

    new: int
    taken: list[str]


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
        self.span_ms = span_ms(self.window_ms)
        self.max_remembered = max_remembered
        self.inflight_ttl_ms = _ms(inflight_ttl)
        self.journal_max = journal_max
        self.keep_ms = _ms(MARK_KEEP)
        self.gap_ms = _ms(ATTENDANCE_GAP)

    def claim(self, message_ids: Sequence[str]) -> list[Claim]:
        """One ``Claim`` per id, in order; ids answered ``HANDLE`` now carry this owner's in-flight mark.

        An id that appears twice gets ``HANDLE`` once and ``BUSY`` for the repeat.
        """
        if not message_ids:
            return []
        keys = [
            self.keys.seen,
            self.keys.done,
            self.keys.clock,
            *(self.keys.inflight(m) for m in message_ids),
        ]
        args: list[str | int | bytes] = [
            self.max_remembered, self.inflight_ttl_ms, self.owner, self.keep_ms, self.gap_ms, *message_ids,
            *(fingerprint(m) for m in message_ids),
        ]  # fmt: skip
        with driver_errors():
            reply = run_script(self.client, scripts.CLAIM, keys, args)
        return parse_claims(reply, len(message_ids))

    def done(self, message_ids: Sequence[str], at: float | None = None) -> Remembered:
        """Remember ``message_ids`` as handled for one window, drop this owner's in-flight marks, and count
        and journal (event time ``at``, epoch seconds; default now) the ids new to the window, in one step;
        how many were new, and which ids' marks were another owner's.

        Safe to call again after a failure: an id already remembered is not counted or journaled twice.
        """
        if not message_ids:
            return Remembered(0, [])
        entity = self.keys.entity
        keys = [
            self.keys.seen,
            self.keys.done,
            self.keys.counts,
            journal_keys.journal(entity),
            journal_keys.overflow(entity),
            *(self.keys.inflight(m) for m in message_ids),
        ]
        event = JournalEvent(EventKind.HANDLED, time.time() if at is None else at).encode()
        args: list[str | int | bytes] = [
            self.window_ms,
            self.span_ms,
            FILL,
            self.owner,
            self.journal_max,
            len(event),
            *event,
            *message_ids,
            *(fingerprint(m) for m in message_ids),
        ]
        with driver_errors():
            reply = run_script(self.client, scripts.DONE, keys, args)
        return Remembered(int(reply[0]), [_text(m) for m in reply[1:]])

    def release(self, message_ids: Sequence[str]) -> None:
        """Drop this owner's in-flight marks of ``message_ids`` (their handler failed: let a copy retry)."""
        if not message_ids:
            return
        with driver_errors():
            run_script(
                self.client, scripts.RELEASE, [self.keys.inflight(m) for m in message_ids], [self.owner]
            )

    def renew(self, message_ids: Sequence[str]) -> list[Renewal]:
        """Extend this owner's in-flight marks of ``message_ids`` (slow handlers) by ``inflight_ttl``: one
        ``Renewal`` per id, in order. Without ids it is the heartbeat that keeps the scope's attended clock
        running (the lock watch sends it every tick)."""
        keys = [
            self.keys.seen,
            self.keys.done,
            self.keys.clock,
            *(self.keys.inflight(m) for m in message_ids),
        ]
        args: list[str | int | bytes] = [
            self.owner, self.inflight_ttl_ms, self.keep_ms, self.gap_ms, *message_ids,
            *(fingerprint(m) for m in message_ids),
        ]  # fmt: skip
        with driver_errors():
            reply = run_script(self.client, scripts.RENEW, keys, args)
        return parse_renewals(reply, len(message_ids))

    def check_compact(self) -> None:
        """Raise ``ConfigurationError`` unless the server keeps a hash of ``COMPACT_ENTRIES`` fingerprints in
        its compact encoding (``hash-max-listpack-entries`` and ``-value``, 512 and 64 by default; a server
        set lower would hold the record at several times the memory). Checked by building one such hash
        under the scope's own hash tag and deleting it."""
        probe = self.keys.prefix + "compact-probe:" + self.owner
        fields = {fingerprint(f"{self.owner}:{i}"): b"" for i in range(COMPACT_ENTRIES)}
        with driver_errors():
            pipe = self.client.pipeline(transaction=False)
            pipe.delete(probe)
            pipe.hset(probe, mapping=fields)  # type: ignore[arg-type]
            pipe.object("encoding", probe)
            pipe.delete(probe)
            encoding = _text(pipe.execute()[2])
        if encoding not in ("listpack", "ziplist"):
            raise ConfigurationError(
                f"Redis keeps a hash of {COMPACT_ENTRIES} fields of {FINGERPRINT_BYTES} bytes as "
                f"{encoding!r}, not in its compact encoding: the receivers' window would take several "
                "times the memory documented. Set hash-max-listpack-entries >= {COMPACT_ENTRIES} and "
                f"hash-max-listpack-value >= {FINGERPRINT_BYTES} (Redis's defaults are 512 and 64)"
            )

    # ---- observation (status, tests, the benchmark) -----------------------------------------------------
    def _lookup(self, message_id: str) -> tuple[bool, int]:
        keys = [self.keys.seen, self.keys.done]
        args: list[str | bytes] = [message_id, fingerprint(message_id) if message_id else b""]
        with driver_errors():
            found, count = run_script(self.client, scripts.LOOKUP, keys, args)
        return bool(found), int(count)

    def remembered(self) -> int:
        """Ids in the window: those of its live buckets (kept up to one span longer than the window)."""
        return self._lookup("")[1]

    def is_done(self, message_id: str) -> bool:
        """True while ``message_id`` is remembered as handled."""
        return self._lookup(message_id)[0]

    def in_flight(self, message_id: str) -> bool:
        """True while some receiver holds a live in-flight mark of ``message_id``."""
        keys = [self.keys.clock, self.keys.inflight(message_id)]
        with driver_errors():
            return bool(run_script(self.client, scripts.IN_FLIGHT, keys, [self.gap_ms]))

    def mark_owner(self, message_id: str) -> str | None:
        """Whose in-flight mark of ``message_id`` exists (live or not), or None."""
        with driver_errors():
            value = self.client.get(self.keys.inflight(message_id))
        if value is None:
            return None
        owner, at, deadline = _text(value).rpartition("@")
        return owner if at and deadline.isdigit() else _text(value)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
