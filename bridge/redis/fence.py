"""``Fence``: the proof of lease a fenced Lua script checks before it writes.

Leases live in ``bridge.state.lease``; the scripts that must refuse a writer whose lease passed to another
live with the data they change (``bridge.outbox.scripts``, ``bridge.state.scripts``). Both sides need the
value that travels between them, so it lives here, below both, and neither package imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fence:
    """A lease key and the token its holder took it with.

    A write that is only right while its writer holds the lease (acknowledging an outbox entry, setting or
    clearing a shard's backoff) carries the fence into its Lua script, which checks ``GET key == token``
    and writes in the same step: a holder whose lease expired and was taken over is refused
    (``LeaseLostError``) instead of undoing the new holder's work. Tokens are unique per acquisition.
    """

    key: str
    token: str
