"""The one rule for naming Redis keys: everything of one entity shares the hash tag ``{<entity>}``.

On a Redis Cluster a Lua script may only touch keys of one slot, and the slot of a key with ``{...}`` in it
is that of the text between the braces. So every key of an entity (``bridge:{E}:...``: outbox shards,
counters, idempotency markers, role, health, leases; see ``bridge.outbox.keys`` and ``bridge.state.keys``)
lives in one slot and a script may update any of them together. Records shared by many entities live under
tags of their own (``{bridge}``, ``{lease:<name>}``, ``{backlog:<namespace>}``) and are never touched in
the same script as an entity's keys.
"""

from __future__ import annotations


def tag(name: str) -> str:
    """The prefix ``bridge:{<name>}:`` of every key that must share ``name``'s slot.

    A ``}`` in the name would end the hash tag early; validated entity paths never contain one, and the
    replacement keeps a hand-made name from splitting an entity's keys over two slots.
    """
    return "bridge:{" + name.replace("}", "%7D") + "}:"


def tagged(name: str) -> str:
    """The key ``bridge:{<name>}`` itself, for a record that is alone in its slot (a named lease)."""
    return "bridge:{" + name.replace("}", "%7D") + "}"
