"""Where the journal lives in Redis.

Each entity's journal carries the entity's hash tag, so a Lua script (or a ``MULTI``) may write an event
together with the state change it records, also on a Redis Cluster: the outbox write script adds the
``accepted`` event in the same step as the outbox entry.

=======================================  =================================================================
key                                      holds
=======================================  =================================================================
``bridge:{E}:journal``                   the events of entity E (stream; fields: ``bridge.core.journal``)
``bridge:{E}:journal:overflow``          hash kind -> events not written because the stream was full
``bridge:{bridge}:journals``             set of journal owners ever written by a ``JournalStore``
``bridge:{bridge}:journal-folders``      hash folder id -> where rolls wrote (``bridge.journal.folders``)
``bridge:{lease:journal-roll}``          the one roller's lease (``bridge.state.lease``)
=======================================  =================================================================

A journal's owner is an entity name, or ``~<scope>`` for events that belong to no entity (a backlog
queue's receive calls, ``~backlog:<namespace>``); entity names start with a letter or digit, so the two
never collide.
"""

from __future__ import annotations

from bridge.redis.keys import tag

REGISTRY = "bridge:{bridge}:journals"
FOLDERS = "bridge:{bridge}:journal-folders"
ROLL_LEASE = "journal-roll"


def journal(owner: str) -> str:
    """The journal stream of ``owner``."""
    return tag(owner) + "journal"


def overflow(owner: str) -> str:
    """Counters of events that found ``owner``'s journal full."""
    return tag(owner) + "journal:overflow"


def backlog_scope(namespace: str) -> str:
    """The owner name of events about the backlog queues of primary namespace ``namespace``."""
    return "~backlog:" + namespace


def is_entity(owner: str) -> bool:
    """True when ``owner`` names an entity (not a ``~`` scope)."""
    return not owner.startswith("~")
