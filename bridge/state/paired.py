"""Paired-namespace mode's shared state in Redis: the failover timer per entity and the backlog rotation.

``PairedStore.apply`` runs a whole sequence of ``bridge.core.paired`` changes as one Lua script
(``scripts.PAIRED``) with exactly the semantics of ``apply_change``: ``StartTimer`` and ``EngageFailover``
are set-if-absent, so the first failure's time wins however many workers race; ``MarkAvailable`` deletes
both timer fields, so every worker sends to the primary again at once. The script returns the hash before
and after, so exactly one worker sees the engagement (or the recovery) and logs it at WARNING.

The set of failed-over entities (what the ping visits) is kept in ``bridge:{bridge}:failed-over``. On one
server the script updates it atomically with the entity's hash; on a Cluster the set lives in another slot,
so it is updated after the script and may briefly lag: ``failed_over_entities`` checks every member against
its hash and also checks the ``candidates`` the caller names (the configured paired entities), so a lost
update never leaves an entity failed over without pings.

The backlog rotation belongs to a set of backlog queues, ``<primary-namespace>/x-servicebus-transfer/<i>``,
which every entity of that namespace shares: a queue that failed for one entity leaves it for all of them.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bridge.core.hash_fields import decode_fields
from bridge.core.outcomes import scrub_secrets
from bridge.core.paired import (
    BacklogRotation,
    EngageFailover,
    MarkAvailable,
    PairedChange,
    PairedState,
    RecordError,
    RecordPing,
    RemoveFromRotation,
    StartTimer,
    backlog_queue_path,
)
from bridge.observability import transitions
from bridge.redis.connection import is_cluster
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import run_script
from bridge.redis.types import SyncRedis
from bridge.state import keys, scripts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PairedUpdate:
    """The entity's paired state just before and just after one atomic ``apply``."""

    before: PairedState
    after: PairedState

    @property
    def engaged(self) -> bool:
        """This call engaged failover (no other worker did it first)."""
        return not self.before.failed_over and self.after.failed_over

    @property
    def restored(self) -> bool:
        """This call ended failover: the primary is used again."""
        return self.before.failed_over and not self.after.failed_over


def _text(value: float | str) -> str:
    # The encoding of ``hash_fields.put_field``, so a value reads back exactly as the pure core stores it.
    return repr(value) if isinstance(value, float) else str(value)


def encode_changes(changes: Iterable[PairedChange]) -> list[str]:
    """The script's op list for ``changes`` (see ``scripts.PAIRED``)."""
    out: list[str] = []
    for change in changes:
        if isinstance(change, StartTimer):
            out += ["start", _text(change.at)]
        elif isinstance(change, EngageFailover):
            out += ["engage", _text(change.at)]
        elif isinstance(change, MarkAvailable):
            out += ["available"]
        elif isinstance(change, RecordError):
            out += ["error", _text(change.at), scrub_secrets(change.error)]
        elif isinstance(change, RecordPing):
            out += ["ping", _text(change.at)]
        else:
            raise TypeError(f"not a paired change: {change!r}")
    return out


class PairedStore:
    """Failover timers of entities and backlog rotations, shared by every worker and beat process."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client
        self.cluster = is_cluster(client)

    def get(self, entity: str) -> PairedState:
        """The entity's paired state (healthy when never recorded)."""
        with driver_errors():
            return PairedState.from_fields(self.client.hgetall(keys.paired(entity)))

    def claim_ping(self, entity: str, token: str, ttl_ms: int) -> bool:
        """True for the one caller that may ping ``entity`` until it releases the claim (``release_ping``)
        or ``ttl_ms`` milliseconds pass."""
        with driver_errors():
            return bool(self.client.set(keys.ping_claim(entity), token, nx=True, px=max(1, ttl_ms)))

    def release_ping(self, entity: str, token: str) -> None:
        """End the claim ``token`` holds on ``entity``'s ping (nothing when it expired or is another's)."""
        with driver_errors():
            run_script(self.client, scripts.RELEASE_CLAIM, [keys.ping_claim(entity)], [token])

    def apply(self, entity: str, changes: Sequence[PairedChange]) -> PairedUpdate:
        """Apply ``changes`` in order, atomically, as ``core.paired.apply_changes`` would."""
        ops = encode_changes(changes)
        args = ["0" if self.cluster else "1", entity, *ops]
        with driver_errors():
            # On a Cluster the set is in another slot and may not even be declared to the script.
            script_keys = [keys.paired(entity)] if self.cluster else [keys.paired(entity), keys.FAILED_OVER]
            reply = run_script(self.client, scripts.PAIRED, script_keys, args)
            update = PairedUpdate(
                before=PairedState.from_fields(scripts.pairs(reply[0])),
                after=PairedState.from_fields(scripts.pairs(reply[1])),
            )
            if self.cluster and update.before.failed_over != update.after.failed_over:
                if update.after.failed_over:
                    self.client.sadd(keys.FAILED_OVER, entity)
                else:
                    self.client.srem(keys.FAILED_OVER, entity)
        self._log(entity, changes, update)
        return update

    def apply_all(
        self, entity: str, namespace: str, changes: Sequence[PairedChange | RemoveFromRotation]
    ) -> PairedUpdate:
        """Apply a decision's paired changes: rotation removals to ``namespace``'s rotation, the rest to
        the entity (in order, atomically)."""
        for change in changes:
            if isinstance(change, RemoveFromRotation):
                self.remove_from_rotation(namespace, change)
        return self.apply(entity, [c for c in changes if not isinstance(c, RemoveFromRotation)])

    @staticmethod
    def _log(entity: str, changes: Sequence[PairedChange], update: PairedUpdate) -> None:
        if update.engaged:
            reason = next((c.reason for c in changes if isinstance(c, EngageFailover)), "")
            log.warning(
                "paired failover engaged for %s: primary -> backlog: %s", entity, scrub_secrets(reason)
            )
            transitions.failover_engaged(entity, scrub_secrets(reason))
        elif update.restored:
            reason = next((c.reason for c in changes if isinstance(c, MarkAvailable)), "")
            log.warning("paired failover ended for %s: backlog -> primary: %s", entity, scrub_secrets(reason))
            transitions.failover_ended(entity, scrub_secrets(reason))

    def failed_over_entities(self, candidates: Iterable[str] = ()) -> list[str]:
        """Entities with failover engaged, sorted: the set's members and ``candidates``, each checked."""
        with driver_errors():
            members = {_decode(m) for m in self.client.smembers(keys.FAILED_OVER)}
            names = sorted(members | set(candidates))
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.hexists(keys.paired(name), "failed_over_at")
            engaged = pipe.execute()
        return [name for name, on in zip(names, engaged, strict=True) if on]

    def rotation(self, namespace: str, count: int) -> BacklogRotation:
        """The rotation of the ``count`` backlog queues named after primary namespace ``namespace``."""
        with driver_errors():
            return BacklogRotation.from_fields(count, self.client.hgetall(keys.rotation(namespace)))

    def remove_from_rotation(self, namespace: str, change: RemoveFromRotation) -> None:
        """Take a backlog queue out of the rotation for every worker (``HSET <index> <at>``, and why)."""
        error = scrub_secrets(change.error)
        with driver_errors():
            self.client.hset(
                keys.rotation(namespace),
                mapping={
                    str(change.index): _text(change.at),
                    f"{change.index}.error": error,
                    f"{change.index}.refused": "1" if change.refused else "0",
                },
            )
        log.warning("backlog queue %s/%d left the rotation: %s", namespace, change.index, error)
        transitions.rotation_removed(backlog_queue_path(namespace, change.index), error)

    def backlog_indexes(self, namespace: str) -> set[int]:
        """Backlog queue indexes that were in use (and may still hold messages)."""
        with driver_errors():
            return {int(_decode(m)) for m in self.client.smembers(keys.backlog_queues(namespace))}

    def register_backlog(self, namespace: str, indexes: Iterable[int]) -> None:
        """Remember backlog queue indexes in use, so a lowered count does not forget their messages."""
        members = [str(i) for i in indexes]
        if members:
            with driver_errors():
                self.client.sadd(keys.backlog_queues(namespace), *members)

    def retire_backlog(self, namespace: str, index: int) -> None:
        """A backlog queue beyond the count was found empty: the syphon stops reading it."""
        with driver_errors():
            self.client.srem(keys.backlog_queues(namespace), str(index))

    def rotation_errors(self, namespace: str) -> dict[int, str]:
        """Why each removed backlog queue left the rotation (the last failure recorded for it)."""
        with driver_errors():
            data = decode_fields(self.client.hgetall(keys.rotation(namespace)))
        out = {}
        for name, value in data.items():
            index, dot, suffix = name.partition(".")
            if dot and suffix == "error" and index.isdigit():
                out[int(index)] = value
        return out


def _decode(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
