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


def false_positive_bound(new_ids: float, remembered: float, bits: int = FINGERPRINT_BYTES * 8) -> float:
    """An upper bound of the chance that any of ``new_ids`` MessageIds never handled before is taken for
    one of at most ``remembered`` ids remembered meanwhile: ``new_ids · remembered / 2^bits``.

    A false "already handled" needs one pair (new id, remembered id) of equal fingerprints; there are at
    most ``new_ids · remembered`` such pairs, each equal with chance ``2^-bits``, however often an id is
    looked up (the same pair again is the same comparison). It counts every pair whether or not the two
    share a slot (pairs in different slots can never match), which only overstates it.
    """
    return new_ids * remembered / 2.0**bits
