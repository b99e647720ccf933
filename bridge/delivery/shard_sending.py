"""The drainer's sending part: one batched send, recorded (outcomes, cost, metrics, journal, health), and
the wait after a send that timed out (``bridge.core.abandoned``)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence

from bridge.core import abandoned
from bridge.core.cost import Operation
from bridge.core.replication import RetryContext
from bridge.core.roles import Role, next_health
from bridge.core.trace_context import trace_id
from bridge.delivery.attempts import BatchOutcome, batch_outcome
from bridge.delivery.shard_state import ShardState
from bridge.observability import messaging_metrics, metrics, send_spans, tracing, transitions
from bridge.observability.send_spans import SendSpan
from bridge.servicebus.messages import OutgoingMessage

log = logging.getLogger(__name__)


class ShardSending(ShardState):
    """Sends for one tenure (``bridge.delivery.modes.base.SendPort``)."""

    def retry_context(self) -> RetryContext:
        """The clock, this tenure's retry count and the backoff (``bridge.delivery.modes.base.SendPort``)."""
        return self._retry_context()

    def _retry_context(self) -> RetryContext:
        # The retry count is this tenure's: read at take-over, counted by ``schedule`` (only we write it).
        return RetryContext(self.ctx.clock(), self.attempts, self.ctx.backoff, random.random)

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
        key = (role, path)
        message_ids = [m.message_id for m in messages]  # the SDK's getter costs microseconds: once each
        ids = [str(i) for i in message_ids]
        left = abandoned.wait_left(self.abandoned, role, path, self.ctx.clock())
        if left > 0 and not abandoned.resent(self.abandoned_ids.get(key), ids):
            return BatchOutcome([abandoned.refused(role, path, left)] * len(messages))
        span = self._start_span(role, path, messages, operation) if tracing.enabled() else None
        started = time.perf_counter()
        result = self.ctx.pool.send(role, path, messages, keys=keys)
        elapsed = time.perf_counter() - started
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
            # Counted with the batch's settlement (``ShardSettling._apply``), not here: one Redis write
            # (fsync'd with ``appendfsync always``) less on the path of every batch.
            self.cost = self.cost.add(operation, len(result.accepted))
        metrics.record_send(self.entity, role, operation is Operation.BACKLOG_SEND, outcome.outcomes, elapsed)
        if messaging_metrics.enabled():
            messaging_metrics.record_send(
                "send", path, self._server_address(role), accepted=len(result.accepted),
                refused=len(messages) - len(result.accepted),
                error_type=send_spans.outcome_type(outcome.outcomes), seconds=elapsed,
            )  # fmt: skip
        backlog = path if operation is Operation.BACKLOG_SEND else None
        self.journal.record_send(role, message_ids, outcome.outcomes, now, backlog_queue=backlog)
        self._record_health(role, outcome, span, messages)
        if self.abandoned_wait:
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
        failover = operation is Operation.BACKUP_SEND or (self.mode != "active" and role == "secondary")
        attributes: dict[str, str | int | bool] = {
            "bridge.namespace.role": role,
            "bridge.replication.mode": self.mode,
            "bridge.attempt": self.attempts + 1,
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
            [m.message_id for m in messages],
            attributes,
        )

    def _after_send(self, role: Role, path: str, ids: list[str], outcome: BatchOutcome, now: float) -> None:
        """Start a wait after a timeout (``bridge.core.abandoned``), or end one the resent messages ended."""
        key = (role, path)
        lost_track = abandoned.timed_out(ids, outcome.outcomes)
        if lost_track:
            still = abandoned.wait_left(self.abandoned, role, path, now) > 0
            before = self.abandoned_ids.get(key, frozenset()) if still else frozenset()
            self.abandoned[key] = now + self.abandoned_wait
            self.abandoned_ids[key] = before | lost_track
            self.ctx.retry.wait_after_abandoned(self.entity, self.shard, role, path, wait=self.abandoned_wait)
            log.info(
                "entity %s shard %d: %d messages to %s on %s timed out; nothing newer goes there for %.1fs",
                self.entity,
                self.shard,
                len(lost_track),
                path,
                role,
                self.abandoned_wait,
            )
        elif key in self.abandoned_ids and abandoned.all_accepted(
            self.abandoned_ids[key], ids, outcome.outcomes
        ):
            del self.abandoned[key], self.abandoned_ids[key]
            self.ctx.retry.end_wait_after_abandoned(self.entity, self.shard, role, path)

    def _record_health(
        self, role: Role, outcome: BatchOutcome, span: SendSpan | None, messages: Sequence[OutgoingMessage]
    ) -> None:
        # The batch's overall verdict: any accepted message proves the namespace up; otherwise the
        # first failure says how it is doing (a message-permanent failure says nothing about it).
        verdict = next((o for o in outcome.outcomes if o.ok), None) or outcome.outcomes[0]
        before = self.ctx.roles.health(self.entity, role)
        trace = None if verdict.ok else failure_trace(span, messages[0])
        after = next_health(before, verdict, self.ctx.clock(), trace)
        if after is not before:
            self.ctx.roles.set_health(self.entity, role, after)
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
