"""The bridge's one exception tree, and what a failed namespace operation means (``ErrorClass``).

Every error that leaves an adapter is one of these; driver exceptions (redis, azure, proton, pyspark) are
translated at the adapter edge with ``raise X(...) from None`` so callers never import a driver to catch
something. A class whose error can end a namespace operation carries its decision: ``error_class`` (retry
the same namespace, fail over, dead-letter, or alert), ``timeout`` (the paired failover timer starts) and
``entity_missing`` (the syphon dead-letters). ``bridge.core.error_classes.classify`` is the one place that
reads them; Service Bus SDK exceptions get theirs from ``bridge.servicebus.translate``, which turns them
into these classes.

Messages never contain secrets: adapters build them from names and codes, not from connection strings.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class ErrorClass(StrEnum):
    """What a failed namespace operation means: the four failure classes (docs/replication.md)."""

    TRANSIENT = "transient"
    """Retry the same namespace, briefly."""
    OUTAGE = "outage"
    """The namespace (or entity) is down: fail over."""
    MESSAGE_PERMANENT = "message_permanent"
    """This message will never be accepted: dead-letter it locally with the reason."""
    CONFIGURATION = "configuration"
    """Credentials or entity are wrong: alert loudly and treat the namespace as unavailable."""


class BridgeError(Exception):
    """Base of every error the bridge raises on purpose."""

    error_class: ClassVar[ErrorClass | None] = None
    """The failure class of a namespace operation that ended with this error; None: the error says
    nothing about a namespace (``classify`` takes it as an unknown, transient failure)."""
    timeout: ClassVar[bool] = False
    """The operation timed out: it starts the paired failover timer even when TRANSIENT."""
    entity_missing: ClassVar[bool] = False
    """The entity does not exist in the namespace."""
    address_refused: ClassVar[bool] = False
    """The namespace's address refused a TCP connect (the whole namespace host, not one entity)."""


class ConfigurationError(BridgeError):
    """Settings are missing or invalid; start-up stops with a message naming the field."""

    error_class = ErrorClass.CONFIGURATION


class InvalidMessageError(BridgeError):
    """A message broke a validation rule; nothing was stored.

    ``code`` is a stable machine-readable rule name (e.g. ``message_id_too_long``), ``field`` the envelope
    field at fault (``None`` when the message as a whole is at fault), ``index`` the position in a batch.
    """

    error_class = ErrorClass.MESSAGE_PERMANENT

    def __init__(self, code: str, message: str, field: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.index = index

    @property
    def detail(self) -> str:
        """The human-readable reason, without the code."""
        return str(self.args[0])


class MessageTooLargeError(InvalidMessageError):
    """A message body or encoded message exceeds the entity's size limit."""

    error_class = ErrorClass.MESSAGE_PERMANENT


class UnknownEntityError(BridgeError):
    """The entity is not in the bridge's settings (``only_configured_entities``); no namespace was asked."""


class AuthenticationError(BridgeError):
    """A caller presented no credentials or wrong ones."""


class BackpressureError(BridgeError):
    """The outbox is at its configured bound; try again after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProblemStreamFullError(BackpressureError):
    """An entity's quarantine or dead-letter stream holds ``entities.<name>.max_problem_entries``: the entry
    that should go there stays where it is (the outbox, the ingress stream) until an operator makes room."""

    def __init__(self, entity: str, stream: str, length: int, bound: int, retry_after: float = 5.0) -> None:
        super().__init__(
            f"entity {entity}: the {stream} stream is full ({length} of {bound} entries); "
            "the entry stays where it is until room is made",
            retry_after,
        )
        self.entity = entity
        self.stream = stream
        self.length = length
        self.bound = bound


class StateStoreUnavailableError(BridgeError):
    """Redis (the bridge's state store) is unreachable, read-only or refused a command.

    Raised by every Redis adapter (``bridge.redis.errors``) for reads and writes of shared state: roles,
    leases, retry times, status. The outbox's write path raises the more specific
    ``OutboxUnavailableError``, so a caller that only cares that Redis failed catches this class.
    """


class OutboxUnavailableError(StateStoreUnavailableError):
    """Redis did not accept the write (down, read-only, or WAIT not satisfied); nothing was acknowledged."""


class DurabilityNotReachedError(OutboxUnavailableError):
    """Too few confirmations for ``ingress.durability`` in time: written on the primary, not acknowledged."""

    def __init__(self, message: str, *, mode: str, required: int, confirmed: int, local_fsync: bool) -> None:
        super().__init__(message)
        self.mode = mode
        self.required = required
        self.confirmed = confirmed
        self.local_fsync = local_fsync


class OutboxLayoutChangedError(OutboxUnavailableError):
    """The entity's shard count in Redis differs from the writer's; nothing was written (it retries)."""

    def __init__(self, message: str, shards: int) -> None:
        super().__init__(message)
        self.shards = shards


class LeaseLostError(BridgeError):
    """The lease a write was fenced with is held by someone else (or expired); nothing was written.

    A drainer that gets it stops working on the shard: the new holder claims and resends what was pending.
    """


class InvariantError(BridgeError):
    """An internal invariant did not hold (a bug, not a fault of Redis or Service Bus); nothing was acked."""


class EntityNotAllowedError(AuthenticationError):
    """The caller's API key is valid but limited to other entities."""


class PartitionUnavailableError(BridgeError):
    """The outbox shard a partition key maps to is unavailable; other keys are unaffected."""


class CorruptEntryError(BridgeError):
    """A stored outbox entry cannot be read back (unknown version, missing or malformed field)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NamespaceError(BridgeError):
    """A Service Bus namespace failed an operation; subclasses carry the failure class."""

    def __init__(self, message: str, namespace: str | None = None) -> None:
        super().__init__(message)
        self.namespace = namespace


class TransientNamespaceError(NamespaceError):
    """A brief failure (server busy, a timeout under load); retry the same namespace."""

    error_class = ErrorClass.TRANSIENT


class NamespaceOutageError(NamespaceError):
    """The namespace is unreachable or failing as a whole; fail over."""

    error_class = ErrorClass.OUTAGE


class NamespaceRefusedError(NamespaceOutageError):
    """The SDK could not connect: the namespace's address refused the TCP connection (the whole namespace
    host is down, not one entity). What an earlier attempt of the same call sent is unknown, as for any
    outage."""

    error_class = ErrorClass.OUTAGE
    address_refused = True


class AttemptDeadlineExceeded(NamespaceOutageError):
    """An attempt overran the bridge's hard deadline (e.g. a blackholed endpoint); the client is discarded.

    An OUTAGE, not TRANSIENT: the SDK's own retries were already inside that deadline.
    """

    error_class = ErrorClass.OUTAGE
    timeout = True


class EndpointRefusedError(NamespaceOutageError):
    """The namespace's address refused a TCP connect a moment ago (the connect probe,
    ``bridge.core.reachability``): the send was not started, so nothing of it can arrive."""

    error_class = ErrorClass.OUTAGE
    address_refused = True


class RefusedMidAttemptError(EndpointRefusedError):
    """The address refused a TCP connect while an SDK send was still running (retrying on its own): the
    attempt is abandoned, as at the deadline, so its fate is unknown — a late copy is a duplicate."""

    error_class = ErrorClass.OUTAGE
    timeout = True
    address_refused = True


class NamespaceConfigurationError(NamespaceError):
    """Authentication failed or the entity does not exist; alert loudly and treat as unavailable."""

    error_class = ErrorClass.CONFIGURATION


class MessagePermanentError(NamespaceError):
    """The namespace will never accept this message (e.g. too large); dead-letter it locally."""

    error_class = ErrorClass.MESSAGE_PERMANENT


class NamespaceTimeoutError(TransientNamespaceError):
    """No answer within the SDK's timeout: transient, but it starts the paired failover timer."""

    error_class = ErrorClass.TRANSIENT
    timeout = True


class NamespaceEntityNotFoundError(NamespaceConfigurationError):
    """The entity does not exist in the namespace (the syphon dead-letters messages bound for it)."""

    error_class = ErrorClass.CONFIGURATION
    entity_missing = True


class NamespaceRoleMissingError(NamespaceConfigurationError):
    """The identity signed in but lacks a right (Send, Listen, Manage); the message names the role."""

    error_class = ErrorClass.CONFIGURATION

    def __init__(self, message: str, namespace: str | None = None, right: str = "") -> None:
        super().__init__(message, namespace)
        self.right = right


class EmptyJournalError(BridgeError):
    """The journal folder holds no events: a report on it would read as "nothing lost", so none is made."""


class LedgerBehindError(BridgeError):
    """``bridge report --from-ledger`` found no live ledger, or one that has not read every journal file
    in time: its answer would not be the journal's, so none is given."""


class LedgerStoppingError(BridgeError):
    """A live-ledger micro-batch began after the ledger was asked to stop: failed uncounted (Spark runs it
    again after a restart)."""


class EmulatorError(BridgeError):
    """The local Service Bus failed or refused something; the root of ``bridge.emulator.errors``."""
