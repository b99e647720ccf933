"""The drainer's sending collaborator: one batched send, recorded (outcomes, cost, metrics, journal,
health), and the wait after a send that timed out (``bridge.core.abandoned``). It is handed the tenure's
state (``bridge.delivery.tenure.TenureState``) and keeps none of its own; what a send adds to the batch's
tallies (its billable sends, a use of the messages packed ahead) it hands to the drainer as a
``SendTally``, and the drainer folds it into the state."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bridge.core import abandoned
from bridge.core.cost import Operation
from bridge.core.decisions import Target
from bridge.core.expiry import built_ttl_holds
from bridge.core.replication import RetryContext
from bridge.core.roles import Role, RoleState, next_health
from bridge.core.trace_context import trace_id
from bridge.delivery.attempts import BatchOutcome, batch_outcome
from bridge.delivery.context import DeliveryContext
from bridge.delivery.expiry import with_remaining_ttl
from bridge.delivery.read_ahead import PackedAhead
from bridge.delivery.tenure import HealthDue, SendTally, TenureState
from bridge.observability import messaging_metrics, metrics, send_spans, tracing, transitions
from bridge.observability.send_spans import SendSpan
from bridge.outbox.reader import OutboxEntry
from bridge.process_threads import ProcessThreads
from bridge.servicebus.messages import OutgoingMessage, message_id_of, to_message
from bridge.servicebus.pool import NamespacePool
from bridge.servicebus.sending import SendResult, SharedBatches, prepack
from bridge.state.retry import decode_targets

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchSend:
    """One batched send: ``messages`` to ``path`` in namespace ``role`` (``keys``: their order keys)."""

    role: Role
    path: str
    messages: Sequence[OutgoingMessage]
    operation: Operation
    keys: Sequence[str | None] | None = None
    shared: SharedBatches | None = None
    """Set on the sends of the same messages to several namespaces: their batches are packed once."""


SEND_THREADS = 32
"""Threads per process for the sends of a batch beyond its first (``_call_pool``), shared by every drainer:
active mode's second copy, paired mode's backlog queues after the first."""

_SEND_THREADS = ProcessThreads(SEND_THREADS, "bridge-send")


def _call_pool(pool: NamespacePool, calls: Mapping[int, BatchSend]) -> dict[int, tuple[SendResult, float]]:
    """Each send's ``pool.send`` and its seconds; all but the first on the process's send threads, at once.

    Why a pool of threads kept for the process and not a thread started per send: ``Thread.start`` waits
    until the new thread runs, and on a busy process that wait (the new thread needs the interpreter lock)
    took a sixth of an active shard's time in a drain after an outage. Each call is bounded by the pool's
    attempt deadline, so a thread of the pool is never held longer than that; more sends at once than
    threads wait for one, they are never lost."""

    def call(send: BatchSend) -> tuple[SendResult, float]:
        started = time.perf_counter()
        result = pool.send(send.role, send.path, send.messages, keys=send.keys, shared=send.shared)
        return result, time.perf_counter() - started

    items = list(calls.items())
    if not items:
        return {}
    executor = _SEND_THREADS.executor()
    futures = [(index, executor.submit(call, send)) for index, send in items[1:]]
    results: dict[int, tuple[SendResult, float]] = {}
    error: BaseException | None = None
    try:
        results[items[0][0]] = call(items[0][1])
    except BaseException as exc:  # raised again once the others returned, as theirs are
        error = exc
    for index, future in futures:
        try:
            results[index] = future.result()  # each call is bounded by the pool's attempt deadline
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
    return results


ROLES_FRESH = 0.05
"""Seconds the roles read with a batch's entries stand for the roles at its send (``observed_roles``),
measured on this process's monotonic clock (``DeliveryContext.monotonic``): Redis's clock, the context's
``clock``, may step back on a failover and would make older roles count as fresh."""


class ShardSending:
    """Sends for one tenure (``bridge.delivery.modes.base.SendPort``): in, the tenure's state (its retry
    count, abandoned paths and what was read with this batch); out, each send's outcome, with what it
    recorded added to the state (journal events, health owed, abandoned waits) and its tallies (sends to
    count, packed ahead) handed to ``tally``, the drainer's, which folds them into the state."""

    def __init__(self, ctx: DeliveryContext, state: TenureState, tally: Callable[[SendTally], None]) -> None:
        self.ctx = ctx
        self.state = state
        self.tally = tally

    @property
    def entity(self) -> str:
        """The tenure's entity (``SendPort``)."""
        return self.state.tenure.entity

    @property
    def shard(self) -> int:
        """The tenure's shard (``SendPort``)."""
        return self.state.tenure.shard

    def observed_roles(self) -> RoleState:
        """The entity's roles for this batch's send (``bridge.delivery.modes.base.SendPort``): those the
        read of its entries returned (the same script, just after the entries) when at most
        ``ROLES_FRESH`` old and not older than a swap this tenure asked for since (``seen_epoch``: the
        batch read ahead while the batch before it failed over carries the roles before the swap), else
        read now. Taken once per batch.

        Why: a passive shard read the role hash before every send, a Redis round trip in line with each
        batch. Roles can change between any reading and the send it decides; reading them with the entries
        widens that window by at most ``ROLES_FRESH``, and what the send then finds is decided as before
        (``bridge.core.replication``: a swap is compared against the epoch observed)."""
        batch = self.state.batch.take_roles()
        if (
            batch is not None
            and batch[0].epoch >= self.state.batch.seen_epoch
            and self.ctx.monotonic() - batch[1] <= ROLES_FRESH
        ):
            return batch[0]
        return self.ctx.roles.get(self.entity)

    def delivered(self, entry_ids: Sequence[str]) -> dict[str, tuple[Target, ...]]:
        """Where each of this batch's entries was already accepted (active mode; ``SendPort``): read with
        the entries when they came from a read that asked for it, else read now. Taken once per batch.

        Why: the lookup was a Redis round trip in line with every active batch, a fifth of an active
        shard's time in a drain after an outage. Read with the entries it is exact when used: only this
        tenure writes the records of its entries (fenced), and it writes them for entries it sent, never
        for entries read and not sent yet."""
        batch = self.state.batch.take_delivered()
        if batch is None:
            return self.ctx.retry.delivered(self.entity, self.shard, entry_ids)
        return {eid: decode_targets(batch[eid]) for eid in entry_ids if eid in batch}

    def pack_ahead(self, entries: Sequence[OutboxEntry]) -> PackedAhead | None:
        """Active mode, on the read's thread: the entries' messages built, with the TTL left now
        (``with_remaining_ttl``), and packed into batches of the smaller of the two links' limits
        (``prepack``), so that the batch before them, in flight, overlaps this CPU. None when a link's limit
        is not known yet (no batch went over it), an entry's TTL ran out (the batch dead-letters it and
        sends the rest) or a message cannot be built (the batch then builds its own, and meets the error
        there)."""
        limits = [self.ctx.pool.batch_limit(role, self.entity) for role in ("primary", "secondary")]
        known = [limit for limit in limits if limit is not None]
        if not entries or len(known) < len(limits) or any(e.envelope is None for e in entries):
            return None
        now = self.ctx.clock()
        try:
            live = [with_remaining_ttl(e, now) for e in entries]
            envelopes = [e.envelope for e in live if isinstance(e, OutboxEntry) and e.envelope is not None]
            if len(envelopes) < len(entries):
                return None
            messages = tuple(to_message(envelope) for envelope in envelopes)
            shared = prepack(messages, min(known))
        except Exception as exc:  # the send path meets it again, in line, and decides
            log.debug("entity %s shard %d: not packed ahead: %s", self.entity, self.shard, exc)
            return None
        ttls = tuple(envelope.time_to_live for envelope in envelopes)
        return PackedAhead(tuple(e.entry_id for e in entries), messages, shared, ttls)

    def packed(self, entries: Sequence[OutboxEntry]) -> PackedAhead | None:
        """The messages packed with this batch's read when the batch is exactly its entries and each
        message's TTL is still the one left of it (``built_ttl_holds``: ``entries`` carry the TTL left
        now), for a mode that sends them (counted in the report); taken once per batch."""
        packed = self.state.batch.take_packed()
        if packed is None or packed.entry_ids != tuple(e.entry_id for e in entries):
            return None
        left = [None if e.envelope is None else e.envelope.time_to_live for e in entries]
        if not all(built_ttl_holds(b, t) for b, t in zip(packed.time_to_live, left, strict=True)):
            return None
        self.tally(SendTally(packed_ahead=1))
        return packed

    def retry_context(self) -> RetryContext:
        """The clock, this tenure's retry count and the backoff (``bridge.delivery.modes.base.SendPort``)."""
        # The retry count is this tenure's: read at take-over, counted by each backoff (only we write it).
        return RetryContext(self.ctx.clock(), self.state.backoff.attempts, self.ctx.backoff, random.random)

    def send_messages(
        self,
        role: Role,
        path: str,
        messages: Sequence[OutgoingMessage],
        operation: Operation,
        *,
        keys: Sequence[str | None] | None = None,
    ) -> BatchOutcome:
        """One batched send to ``path`` in namespace ``role``: outcomes, cost and health recorded.

        Refused at once, with nothing recorded, while a send there that timed out may still be committed
        (``bridge.core.abandoned``); a send that times out starts such a wait, and one that carries the
        abandoned messages again may go and, once accepted, ends it.
        """
        return self.send_each([BatchSend(role, path, messages, operation, keys)])[0]

    def send_each(self, sends: Sequence[BatchSend]) -> list[BatchOutcome]:
        """Several batched sends, each as ``send_messages`` does it, with their SDK calls at the same time:
        active mode's two copies go to two namespaces, which then work in parallel instead of one after
        the other. Only the pool's calls run on other threads (the pool is thread-safe, one call per
        sender at a time); refusals, outcomes, cost, metrics, journal and health are recorded here, in the
        order of ``sends``, once every call returned."""
        now = self.ctx.clock()
        refusals: list[BatchOutcome | None] = []
        for send in sends:
            left = abandoned.wait_left(self.state.abandoned.until, send.role, send.path, now)
            refused = left > 0 and not abandoned.resent(
                self.state.abandoned.ids.get((send.role, send.path)),
                [message_id_of(m) for m in send.messages],
            )
            outcome = abandoned.refused(send.role, send.path, left)
            refusals.append(BatchOutcome([outcome] * len(send.messages)) if refused else None)
        spans = [
            self._start_span(s.role, s.path, s.messages, s.operation)
            if tracing.enabled() and refusals[i] is None
            else None
            for i, s in enumerate(sends)
        ]
        calls = {i: send for i, send in enumerate(sends) if refusals[i] is None}
        results = _call_pool(self.ctx.pool, calls)
        outcomes = []
        for i, send in enumerate(sends):
            refused_outcome = refusals[i]
            if refused_outcome is not None:
                outcomes.append(refused_outcome)
                continue
            result, elapsed = results[i]
            outcomes.append(self._record_send(send, result, elapsed, spans[i]))
        return outcomes

    def _record_send(
        self, send: BatchSend, result: SendResult, elapsed: float, span: SendSpan | None
    ) -> BatchOutcome:
        """What one batched send's result means: outcomes, cost, metrics, journal, health, abandoned waits."""
        role, path, messages, operation = send.role, send.path, send.messages, send.operation
        ids = [message_id_of(m) for m in messages]
        now = self.ctx.clock()
        outcome = batch_outcome(
            self.ctx.streaks,
            entity=self.entity,
            role=role,
            size=len(messages),
            accepted=result.accepted,
            failed=result.failed,
            now=now,
        )
        if result.accepted:
            # Counted with the batch's settlement (``ShardSettling.apply``), not here: one Redis write
            # (fsync'd with ``appendfsync always``) less on the path of every batch.
            self.tally(SendTally(operation, len(result.accepted)))
        metrics.record_send(self.entity, role, operation is Operation.BACKLOG_SEND, outcome.outcomes, elapsed)
        if messaging_metrics.enabled():
            messaging_metrics.record_send(
                "send", path, self._server_address(role), accepted=len(result.accepted),
                refused=len(messages) - len(result.accepted),
                error_type=send_spans.outcome_type(outcome.outcomes), seconds=elapsed,
            )  # fmt: skip
        barrier = operation is Operation.BARRIER
        backlog = path if operation is Operation.BACKLOG_SEND or barrier else None
        self.state.batch.journal.record_send(
            role, ids, outcome.outcomes, now, backlog_queue=backlog, barrier=barrier
        )
        if outcome.all_ok:
            # "Available" is all it can say: written with the batch's settlement, off the send's path, as
            # of now (a later attempt's record, written before it, stands).
            self.state.batch.health_due.append((role, outcome, now))
        else:
            self._record_health(role, outcome, now, span, messages)
        if self.state.tenure.abandoned_wait:
            self._after_send(role, path, ids, outcome, now)
        if span is not None:
            send_spans.end_send(span, len(result.accepted), send_spans.outcome_type(outcome.outcomes))
        return outcome

    def _server_address(self, role: Role) -> str | None:
        """The namespace's host (the conventions' ``server.address``), None when it is not configured."""
        namespace = self.ctx.settings.primary if role == "primary" else self.ctx.settings.secondary
        return namespace.endpoint_host.rsplit(":", 1)[0] if namespace is not None else None

    def _start_span(
        self, role: Role, path: str, messages: Sequence[OutgoingMessage], operation: Operation
    ) -> SendSpan | None:
        """The ``send <path>`` span of one batch (``bridge.observability.send_spans``)."""
        mode = self.state.tenure.mode
        failover = operation is Operation.BACKUP_SEND or (mode != "active" and role == "secondary")
        attributes: dict[str, str | int | bool] = {
            "bridge.namespace.role": role,
            "bridge.replication.mode": mode,
            "bridge.attempt": self.state.backoff.attempts + 1,
            "bridge.failover": failover,
            "bridge.operation": operation.value,
        }
        address = self._server_address(role)
        if address is not None:
            attributes["server.address"] = address
        return send_spans.start_send(
            "send",
            path,
            tracing.message_contexts([m.application_properties for m in messages]),
            [message_id_of(m) for m in messages],
            attributes,
        )

    def _after_send(self, role: Role, path: str, ids: list[str], outcome: BatchOutcome, now: float) -> None:
        """Start a wait after a timeout (``bridge.core.abandoned``), or end one the resent messages ended."""
        key = (role, path)
        lost_track = abandoned.timed_out(ids, outcome.outcomes)
        if lost_track:
            still = abandoned.wait_left(self.state.abandoned.until, role, path, now) > 0
            before = self.state.abandoned.ids.get(key, frozenset()) if still else frozenset()
            self.state.abandoned.until[key] = now + self.state.tenure.abandoned_wait
            self.state.abandoned.ids[key] = before | lost_track
            self.ctx.retry.wait_after_abandoned(
                self.entity, self.shard, role, path, wait=self.state.tenure.abandoned_wait
            )
            log.info(
                "entity %s shard %d: %d messages to %s on %s timed out; nothing newer goes there for %.1fs",
                self.entity,
                self.shard,
                len(lost_track),
                path,
                role,
                self.state.tenure.abandoned_wait,
            )
        elif key in self.state.abandoned.ids and abandoned.all_accepted(
            self.state.abandoned.ids[key], ids, outcome.outcomes
        ):
            del self.state.abandoned.until[key], self.state.abandoned.ids[key]
            self.ctx.retry.end_wait_after_abandoned(self.entity, self.shard, role, path)

    def record_due_health(self, due: list[HealthDue]) -> None:
        """Record the health after sends that every message went through (``BatchInFlight.health_due``)."""
        for role, outcome, at in due:
            self._record_health(role, outcome, at, None, ())

    def _record_health(
        self,
        role: Role,
        outcome: BatchOutcome,
        at: float,
        span: SendSpan | None,
        messages: Sequence[OutgoingMessage],
    ) -> None:
        # The batch's overall verdict: any accepted message proves the namespace up; otherwise the
        # first failure says how it is doing (a message-permanent failure says nothing about it). ``at``:
        # when the send's outcome came; the record changes only for an attempt newer than its last change.
        verdict = next((o for o in outcome.outcomes if o.ok), None) or outcome.outcomes[0]
        before = self.ctx.roles.health(self.entity, role)
        trace = None if verdict.ok else failure_trace(span, messages[0])
        after = next_health(before, verdict, at, trace)
        if after is not before and self.ctx.roles.set_health(self.entity, role, after):
            if after.available and not before.available:
                self.ctx.seen_back(role, self.entity, "a send was accepted")
            if after.available != before.available:
                log.warning(
                    "namespace %s is %s for entity %s: %s",
                    role,
                    "available" if after.available else "UNAVAILABLE",
                    self.entity,
                    after.last_error or "ok",
                )
                reason = "ok" if after.available else after.last_error or "?"
                transitions.availability_changed(self.entity, role, after.available, reason)


def failure_trace(span: SendSpan | None, first: OutgoingMessage) -> str | None:
    """The trace id kept with a failed send's error (the status page links to it): the send span's when it
    is recorded, else that of the first message's creation context (the application's trace, passed on by
    a door when the bridge does not trace), else None."""
    if span is not None:
        context = span.get_span_context()
        if context.is_valid and context.trace_flags.sampled:
            return f"{context.trace_id:032x}"
    ((created, _),) = tracing.message_contexts([first.application_properties])
    return trace_id(created)
