"""The outbox writer bound to a Redis connection: ``SyncOutbox`` (blocking) and ``AsyncOutbox`` (asyncio).

One call sends every group's script in one pipeline (one round trip), with ``WAIT`` or ``WAITAOF`` at its
end when the durability policy (``bridge.core.durability``) asks for confirmations, and returns per group
either its acks or the error that refused it. Driver errors become
``OutboxUnavailableError`` / ``BackpressureError`` here and never leave the package.

Both classes run the same steps, written once: ``_write_steps`` is a generator that decides every Redis
round trip (``Pipeline``, ``Script``, ``Load``), receives its reply and interprets it, without doing any
I/O itself; the two classes only carry the steps out, one blocking, one with ``await``. So the fast path
for a lone script call, the ``NOSCRIPT`` retry, the Cluster totals and the error handling cannot drift
apart. ``NOSCRIPT`` follows ``bridge.redis.scripts``: nothing ran, so the script is loaded and only the
refused calls are sent again.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis

from bridge.core.durability import FENCE_CHANNEL, LOCAL, Reached, Shortfall, verdict
from bridge.errors import (
    BackpressureError,
    BridgeError,
    DurabilityNotReachedError,
    OutboxLayoutChangedError,
    OutboxUnavailableError,
)
from bridge.outbox import keys
from bridge.outbox.cluster_globals import ClusterGlobals
from bridge.outbox.node_held import AsyncNodeConnections, NodeConnections
from bridge.outbox.scripts import WRITE
from bridge.outbox.writer import Ack, Command, Group, OutboxWriter
from bridge.redis.connection import is_cluster
from bridge.redis.errors import DRIVER_ERRORS, driver_errors, translate
from bridge.redis.held import AsyncHeldConnection, HeldConnection
from bridge.redis.scripts import is_noscript, load, load_async, run_script, run_script_async
from bridge.redis.types import AsyncRedis, SyncRedis
from bridge.settings import Settings

GroupResult = list[Ack] | BridgeError


@dataclass(frozen=True)
class Pipeline:
    """Send ``calls`` in one round trip; the reply is the list of their replies, in order.

    With ``errors_as_values`` a command's error is its reply (one group's refusal must not fail the
    others); otherwise the first error is raised.
    """

    calls: list[tuple[Any, ...]]
    errors_as_values: bool = False
    best_effort: bool = False
    """A driver error is the reply (an ``Exception``, not a list): the caller goes on without it."""


@dataclass(frozen=True)
class Script:
    """One call of the write script outside a pipeline (``run_script``); a refusal is its reply.

    ``held``: on a Cluster, run on the held connection of its master (``bridge.outbox.node_held``); the
    reply is then ``(node name or None, reply)``."""

    command: Command
    held: bool = False


@dataclass(frozen=True)
class Load:
    """Load the write script (after ``NOSCRIPT``); the reply is ``None``."""


@dataclass(frozen=True)
class Confirm:
    """``WAIT``/``WAITAOF`` in a round trip of its own, on the connection that sent the writes; the reply
    is the last command's.

    Sent with the writes, the primary's request for the replicas' fsync'd offsets (``REPLCONF GETACK``)
    reaches a replica together with the write, and it answers before its fsync ("not yet"; the next answer
    comes up to a second later). One round trip later, and behind a ``WAIT``
    (``DurabilityPolicy.confirm_commands``), the replica has written and fsync'd it; a round that still
    falls short is followed by a longer one (``DurabilityPolicy.rounds``).
    """

    commands: tuple[tuple[str | int, ...], ...]


@dataclass(frozen=True)
class ConfirmNodes:
    """Cluster: ``WAIT``/``WAITAOF`` on the held connection of each named master, all at once; the reply
    maps each name to its confirmation (the last command's reply)."""

    commands: tuple[tuple[str | int, ...], ...]
    names: tuple[str, ...]


Step = Pipeline | Script | Load | Confirm | ConfirmNodes
Steps = Generator[Step, Any, list[GroupResult]]


def _write_steps(
    writer: OutboxWriter, groups: Sequence[Group], globals_: ClusterGlobals | None = None, now: float = 0.0
) -> Steps:
    """Every round trip of one ``write`` call, and what its replies mean (no I/O here). ``globals_``: on a
    Cluster, what this process keeps about the global keys (``bridge.outbox.cluster_globals``), at ``now``."""
    if globals_ is not None and any(writer.over_seen_totals(g) for g in groups) and not globals_.paused(now):
        seen = yield Pipeline([("HMGET", keys.TOTALS, "messages", "bytes")], best_effort=True)
        if isinstance(seen, Exception):
            globals_.failed(now)
        else:
            writer.seen_totals = (int(seen[0][0] or 0), int(seen[0][1] or 0))
    early, send = _sort(writer, groups)
    if not send:
        return [early[i] for i in range(len(groups))]
    commands = writer.commands(send)
    replies, confirms = yield from _send_steps(writer, commands)
    results = _collect(writer, groups, early, commands, replies, confirms=confirms)
    results = yield from _relayout_steps(writer, groups, results)
    if globals_ is not None:
        results = yield from _cluster_globals_steps(
            writer, globals_, now, groups, results, sorted_groups=(early, send)
        )
    return results


def _cluster_globals_steps(
    writer: OutboxWriter,
    globals_: ClusterGlobals,
    now: float,
    groups: Sequence[Group],
    results: list[GroupResult],
    *,
    sorted_groups: tuple[dict[int, GroupResult], list[Group]],
) -> Generator[Step, Any, list[GroupResult]]:
    """A Cluster keeps the entity set and the totals in the ``{bridge}`` slot: list the entities just
    written to (after their ``XADD``: ``bridge.outbox.entities``) unless listed recently, and add to the
    totals, without making the write depend on that slot's master more than it must."""
    delta = globals_.add(*_accepted(writer, results, *sorted_groups))  # stored, even if refused below
    unlisted = globals_.to_list(_stored_entities(groups, results), now)
    if unlisted:
        listed = (
            None
            if globals_.paused(now)
            else (yield Pipeline([("SADD", keys.ENTITIES, *unlisted)], best_effort=True))
        )
        if listed is None or isinstance(listed, Exception):
            globals_.failed(now)
            results = _refuse_unlisted(globals_, groups, results, unlisted)
        else:
            globals_.listed(unlisted, now)
    globals_.listed(set(_stored_entities(groups, results)) - set(unlisted), now)
    if globals_.paused(now):
        return results
    totals = yield Pipeline(
        [("HINCRBY", keys.TOTALS, "messages", delta[0]), ("HINCRBY", keys.TOTALS, "bytes", delta[1])],
        best_effort=True,
    )
    if isinstance(totals, Exception):
        globals_.failed(now)
    else:
        globals_.added()
        writer.seen_totals = (int(totals[0]), int(totals[1]))
    return results


def _refuse_unlisted(
    globals_: ClusterGlobals, groups: Sequence[Group], results: list[GroupResult], unlisted: list[str]
) -> list[GroupResult]:
    """The entity set is unreachable: the groups of new entities not in the settings are refused (stored,
    but an entry must not sit where no drainer looks; a retry with the same message_id lists it)."""
    refused = OutboxUnavailableError("the entity set is unreachable (a Redis Cluster master is failing over)")
    return [
        refused if isinstance(r, list) and g.entity in unlisted and globals_.must_refuse(g.entity) else r
        for g, r in zip(groups, results, strict=True)
    ]


LAYOUT_RETRIES = 3
"""Writes re-sharded and sent again after a layout refusal (one is enough unless the count keeps changing)."""


def _relayout_steps(
    writer: OutboxWriter, groups: Sequence[Group], results: list[GroupResult]
) -> Generator[Step, Any, list[GroupResult]]:
    """Groups the script refused because the entity's shard count changed (``bridge.core.layout``): learn
    the recorded count, build them again for it and send them again. Nothing of a refused group was
    written, so this is the same atomic write, only to the shards Redis now says."""
    for _ in range(LAYOUT_RETRIES):
        changed: list[int] = []
        for index, result in enumerate(results):
            if isinstance(result, OutboxLayoutChangedError):
                writer.layouts[groups[index].entity] = result.shards
                changed.append(index)
        if not changed:
            break
        again = [writer.regroup(groups[index]) for index in changed]
        commands = writer.commands(again)
        replies, confirms = yield from _send_steps(writer, commands)
        retried = _collect(writer, again, {}, commands, replies, confirms=confirms)
        for slot, index in enumerate(changed):
            results[index] = retried[slot]
    return results


Sent = tuple[list[Any], list[Any] | None]
"""Script replies (or their errors) in command order, and each command's confirmation reply if any."""


def _send_steps(writer: OutboxWriter, commands: list[Command]) -> Generator[Step, Any, Sent]:
    """Send the script calls and, when the durability asks for it, confirm them."""
    if writer.cluster and _waits(writer):
        return (yield from _cluster_send_steps(writer, commands))
    # A cluster pipeline refuses EVALSHA: one call per entity. A lone call needs no pipeline either.
    if writer.cluster or (len(commands) == 1 and not _waits(writer)):
        replies = []
        for command in commands:
            replies.append((yield Script(command)))
        return replies, None
    replies = yield Pipeline(_calls(writer, commands), errors_as_values=True)
    retry = [i for i in range(len(commands)) if is_noscript(replies[i])]
    if retry:
        yield Load()
        again = yield Pipeline(_calls(writer, [commands[i] for i in retry]), errors_as_values=True)
        for slot, index in enumerate(retry):
            replies[index] = again[slot]
    if _waits(writer):
        policy = writer.durability
        confirmed = None
        for timeout_ms in policy.rounds():
            confirmed = yield Confirm(policy.confirm_commands(timeout_ms))
            if not policy.again(confirmed):
                break
        return list(replies[: len(commands)]), [confirmed] * len(commands)
    return list(replies), None


def _cluster_send_steps(writer: OutboxWriter, commands: list[Command]) -> Generator[Step, Any, Sent]:
    """Each script on its master's held connection, then each of those masters confirms (in rounds, as
    ``_send_steps``; a master confirmed in a round is not asked again). A master that took no write of
    this call (its calls failed) is not asked: its groups are refused anyway."""
    replies: list[Any] = []
    nodes: list[str | None] = []
    for command in commands:
        node, reply = yield Script(command, held=True)
        nodes.append(node)
        replies.append(reply)
    policy = writer.durability
    pending = sorted({n for n, r in zip(nodes, replies, strict=True) if n and not isinstance(r, Exception)})
    confirmed: dict[str, Any] = {}
    for timeout_ms in policy.rounds():
        if not pending:
            break
        got = yield ConfirmNodes(policy.confirm_commands(timeout_ms), tuple(pending))
        confirmed.update(got)
        pending = [name for name in pending if policy.again(got[name])]
    return replies, [confirmed.get(node) if node else None for node in nodes]


def _calls(writer: OutboxWriter, commands: Sequence[Command]) -> list[tuple[Any, ...]]:
    """The script calls, and the fence before a confirmation (``FENCE_CHANNEL`` says why)."""
    calls: list[tuple[Any, ...]] = [
        ("EVALSHA", WRITE.sha, len(command.keys), *command.keys, *command.args) for command in commands
    ]
    if _waits(writer):
        calls.append(("PUBLISH", FENCE_CHANNEL, ""))
    return calls


def _sort(writer: OutboxWriter, groups: Sequence[Group]) -> tuple[dict[int, GroupResult], list[Group]]:
    """Cluster only: refuse up front the groups that would pass the total bound as last seen."""
    early: dict[int, GroupResult] = {}
    send: list[Group] = []
    for index, group in enumerate(groups):
        if writer.cluster and writer.over_seen_totals(group):
            early[index] = _total_full(writer)
        else:
            send.append(group)
    return early, send


def _total_full(writer: OutboxWriter) -> BridgeError:
    return BackpressureError("the outbox of the bridge is full; retry later", retry_after=writer.retry_after)


def _collect(
    writer: OutboxWriter,
    groups: Sequence[Group],
    early: dict[int, GroupResult],
    commands: list[Command],
    replies: list[Any],
    *,
    confirms: list[Any] | None,
) -> list[GroupResult]:
    by_group: dict[int, GroupResult] = {}
    for index, (command, reply) in enumerate(zip(commands, replies, strict=True)):
        judged = verdict(writer.durability, None if confirms is None else confirms[index])
        if isinstance(reply, Exception):
            error = translate(reply, OutboxUnavailableError)
            results: list[GroupResult] = [
                error if isinstance(error, BridgeError) else OutboxUnavailableError("outbox write failed")
            ] * len(command.groups)
        else:
            results = writer.results(command, reply)
        results = [_confirmed(r, judged) if isinstance(r, list) else r for r in results]
        for group, result in zip(command.groups, results, strict=True):
            by_group[id(group)] = result
    out: list[GroupResult] = []
    for index, group in enumerate(groups):
        out.append(early[index] if index in early else by_group[id(group)])
    return out


def _confirmed(acks: list[Ack], judged: Reached | Shortfall) -> GroupResult:
    """The acks stamped with the durability reached, or the refusal when it fell short."""
    if isinstance(judged, Shortfall):
        return DurabilityNotReachedError(
            judged.message(),
            mode=judged.mode,
            required=judged.required,
            confirmed=judged.confirmed,
            local_fsync=judged.local_fsync,
        )
    if judged == LOCAL:
        return acks
    return [replace(ack, durability=judged) for ack in acks]


def _stored_entities(groups: Sequence[Group], results: list[GroupResult]) -> list[str]:
    """Entities that just got an entry (or a duplicate's acknowledgement: listing one more is harmless)."""
    return sorted({g.entity for g, r in zip(groups, results, strict=True) if isinstance(r, list)})


def _waits(writer: OutboxWriter) -> bool:
    return writer.durability.waits


def cluster_globals(settings: Settings, cluster: bool) -> ClusterGlobals | None:
    """The global-key state of a Cluster writer; None on a single server (its script does it all)."""
    if not cluster:
        return None
    return ClusterGlobals(frozenset(settings.entities), relist_after=settings.workers.entity_idle / 2)


def _accepted(
    writer: OutboxWriter, results: list[GroupResult], early: dict[int, GroupResult], send: list[Group]
) -> tuple[int, int]:
    sent = [result for index, result in enumerate(results) if index not in early]
    return writer.accepted(sent, send)


def _writer(client: SyncRedis | AsyncRedis, settings: Settings) -> OutboxWriter:
    """The writer for ``client`` (a Cluster master confirms its own writes: ``bridge.outbox.node_held``)."""
    return OutboxWriter(settings, cluster=is_cluster(client))


def _holds(writer: OutboxWriter) -> bool:
    """A write whose durability waits runs on one held connection (``bridge.redis.held``), on a Cluster
    one per master."""
    return _waits(writer)


class SyncOutbox:
    """Blocking outbox writes (used by ``bridge.Producer`` and the Redis door)."""

    def __init__(self, client: SyncRedis, settings: Settings) -> None:
        # ``client``: any blocking client from ``bridge.redis.connection.sync_client``.
        self.client = client
        self.writer = _writer(client, settings)
        self.globals = cluster_globals(settings, self.writer.cluster)

    def write(self, groups: Sequence[Group]) -> list[GroupResult]:
        """Store every group atomically; per group, its acks or the error that refused it."""
        steps = _write_steps(self.writer, groups, self.globals, time.monotonic())
        held: HeldConnection | NodeConnections | None = None
        if _holds(self.writer):
            held = NodeConnections(self.client) if self.writer.cluster else HeldConnection(self.client)
        reply: Any = None
        try:
            with driver_errors(OutboxUnavailableError):
                while True:
                    try:
                        step = steps.send(reply)
                    except StopIteration as done:
                        results: list[GroupResult] = done.value
                        return results
                    reply = self._do(step, held)
        finally:
            if held is not None:
                held.release()

    def _do(self, step: Step, held: HeldConnection | NodeConnections | None) -> Any:
        if isinstance(held, NodeConnections) and isinstance(step, Script | ConfirmNodes):
            if isinstance(step, ConfirmNodes):
                return held.confirm(step.commands, step.names)
            return held.script(step.command)
        if isinstance(step, Script):
            try:
                return run_script(self.client, WRITE, step.command.keys, step.command.args)
            except redis.exceptions.ResponseError as exc:
                return exc
            except DRIVER_ERRORS as exc:
                if not self.writer.cluster:
                    raise
                return exc  # a Cluster master down fails its entities' groups, not the others'
        if isinstance(step, Load):
            load(self.client, WRITE)
            return None
        if isinstance(held, HeldConnection):
            if isinstance(step, Confirm):
                return held.run(step.commands)[-1]
            assert isinstance(step, Pipeline), "a Cluster confirms on its node connections"
            return held.run(step.calls, errors_as_values=step.errors_as_values)
        assert isinstance(step, Pipeline), "a confirmation runs on a held connection"
        pipe = self.client.pipeline(transaction=False)
        for call in step.calls:
            pipe.execute_command(*call)
        try:
            return pipe.execute(raise_on_error=not step.errors_as_values)
        except DRIVER_ERRORS as exc:
            if step.best_effort:
                return exc
            raise


class AsyncOutbox:
    """asyncio outbox writes (used by the HTTP ingress through the batcher, and ``AsyncProducer``)."""

    def __init__(self, client: AsyncRedis, settings: Settings) -> None:
        # ``client``: any asyncio client from ``bridge.redis.connection.async_client``.
        self.client = client
        self.writer = _writer(client, settings)
        self.globals = cluster_globals(settings, self.writer.cluster)

    async def write(self, groups: Sequence[Group]) -> list[GroupResult]:
        """Store every group atomically; per group, its acks or the error that refused it."""
        steps = _write_steps(self.writer, groups, self.globals, time.monotonic())
        held: AsyncHeldConnection | AsyncNodeConnections | None = None
        if _holds(self.writer):
            held = (
                AsyncNodeConnections(self.client) if self.writer.cluster else AsyncHeldConnection(self.client)
            )
        reply: Any = None
        try:
            with driver_errors(OutboxUnavailableError):
                while True:
                    try:
                        step = steps.send(reply)
                    except StopIteration as done:
                        results: list[GroupResult] = done.value
                        return results
                    reply = await self._do(step, held)
        finally:
            if held is not None:
                await held.release()

    async def _do(self, step: Step, held: AsyncHeldConnection | AsyncNodeConnections | None) -> Any:
        if isinstance(held, AsyncNodeConnections) and isinstance(step, Script | ConfirmNodes):
            if isinstance(step, ConfirmNodes):
                return await held.confirm(step.commands, step.names)
            return await held.script(step.command)
        if isinstance(step, Script):
            try:
                return await run_script_async(self.client, WRITE, step.command.keys, step.command.args)
            except redis.exceptions.ResponseError as exc:
                return exc
            except DRIVER_ERRORS as exc:
                if not self.writer.cluster:
                    raise
                return exc  # a Cluster master down fails its entities' groups, not the others'
        if isinstance(step, Load):
            await load_async(self.client, WRITE)
            return None
        if isinstance(held, AsyncHeldConnection):
            if isinstance(step, Confirm):
                return (await held.run(step.commands))[-1]
            assert isinstance(step, Pipeline), "a Cluster confirms on its node connections"
            return await held.run(step.calls, errors_as_values=step.errors_as_values)
        assert isinstance(step, Pipeline), "a confirmation runs on a held connection"
        pipe = self.client.pipeline(transaction=False)
        for call in step.calls:
            pipe.execute_command(*call)
        try:
            return await pipe.execute(raise_on_error=not step.errors_as_values)
        except DRIVER_ERRORS as exc:
            if step.best_effort:
                return exc
            raise
