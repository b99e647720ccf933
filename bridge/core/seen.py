"""The receivers' compact record of handled MessageIds: fingerprints, time buckets, and their odds.

A handled id is remembered as a 14-byte fingerprint (BLAKE2b of the MessageId's UTF-8 bytes, personalised
so the same id hashes differently from any other use), stored as a field of a small Redis hash. Hashes are
grouped in *buckets* of time: an id handled at ``t`` goes to the bucket whose span holds ``t`` and is
forgotten when that bucket expires, one window after the span ends; so an id is remembered for at least
``window`` and at most ``window + span``. ``BUCKETS_PER_WINDOW`` spans make a window (per-day buckets for
the 7-day default), so a lookup checks ``BUCKETS_PER_WINDOW + 1`` buckets: O(1) per message.

Within a bucket the hashes are the slots of a linear hash table keyed by the fingerprint's first four bytes
(``bridge.receiving.scripts``): the table doubles one slot at a time as the bucket fills, so a slot holds
``FILL`` to ``2 * FILL`` fingerprints on average at any rate, well inside the ``COMPACT_ENTRIES`` that
Redis keeps in its compact (listpack) encoding by default. That keeps the cost per id near the bytes of
the fingerprint itself at 1 msg/s as at 10,000 msgs/s (``docs/receiving.md``, "Window").

Under a sustained rate the live buckets hold up to a window and a span of traffic (``remembered_at``): the
receivers' ``max_remembered`` must be at least that, or the window fills and receiving stalls once a span
(``sustained_rate_limit``; 1,446.8 msgs/s for the default bound and window, ``docs/receiving.md``).

A fingerprint is not the id: two different ids may share one, and the second would then be taken for
handled (completed unhandled: a loss). ``false_positive_bound`` is the chance of that for a number of
ids; ``docs/receiving.md`` states it for a week at 10,000 msgs/s.
"""

from __future__ import annotations

import hashlib
import math

FINGERPRINT_BYTES = 14
"""112 bits: the false "already handled" odds for a week at 10,000 msgs/s are below 1e-14."""
PERSON = b"bridge.rx.seen"
"""BLAKE2b personalisation (at most 16 bytes): fingerprints of this record and nothing else."""
BUCKETS_PER_WINDOW = 7
"""Spans per window: per-day buckets for a 7-day window; a lookup checks this many buckets plus one."""
FILL = 32
"""Average fingerprints per slot before the bucket's table grows by one slot (the fullest hold twice)."""
COMPACT_ENTRIES = 4 * FILL
"""Fingerprints one slot must hold in the compact encoding (the server is checked for it at start)."""


def fingerprint(message_id: str) -> bytes:
    """The ``FINGERPRINT_BYTES`` that stand for ``message_id`` in the record."""
    digest = hashlib.blake2b(message_id.encode(), digest_size=FINGERPRINT_BYTES, person=PERSON)
    return digest.digest()


def span_ms(window_ms: int) -> int:
    """The length of a bucket, in milliseconds, for a window of ``window_ms`` (at least 1)."""
    return max(1, math.ceil(window_ms / BUCKETS_PER_WINDOW))


def remembered_at(rate: float, window_s: float) -> float:
    """The most ids the live buckets hold under a sustained ``rate`` (ids per second): the traffic of one
    window and one span, since an id stays until its bucket expires, one window after the span ends."""
    return rate * (window_s + span_ms(round(window_s * 1000)) / 1000)


def sustained_rate_limit(max_remembered: int, window_s: float) -> float:
    """The highest sustained rate (ids per second) whose window stays within ``max_remembered``. Above it
    the window fills before its oldest bucket expires, and the receiver stops receiving (back-pressure)
    until one does, every span: it keeps up with no more than this rate on average."""
    return max_remembered / remembered_at(1.0, window_s)


def false_positive_bound(new_ids: float, remembered: float, bits: int = FINGERPRINT_BYTES * 8) -> float:
    """An upper bound of the chance that any of ``new_ids`` MessageIds never handled before is taken for
    one of at most ``remembered`` ids remembered meanwhile: ``new_ids · remembered / 2^bits``.

    A false "already handled" needs one pair (new id, remembered id) of equal fingerprints; there are at
    most ``new_ids · remembered`` such pairs, each equal with chance ``2^-bits``, however often an id is
    looked up (the same pair again is the same comparison). It counts every pair whether or not the two
    share a slot (pairs in different slots can never match), which only overstates it.
    """
    return new_ids * remembered / 2.0**bits
