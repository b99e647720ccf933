"""The connect probe's I/O: a plain TCP connect to where the SDK dials a namespace
(``bridge.core.reachability`` decides what it proves and when).

One ``ConnectProbe`` per ``NamespacePool`` (so per process), with the address of each namespace role worked
out once from its settings. The pool and the shard pool ask it these things:

- ``refusing(role)`` before a send: the address refused a probe in the last ``refusal_stands`` seconds,
  so the send fails at once (nothing was sent);
- ``watch(role)`` for the attempt runner: called while a send is still running (first after ``after``
  seconds, then every ``every``), it probes — or reuses an answer less than ``every`` old, one connect
  at a time per address — and returns the error that ends the attempt when the address refuses;
- ``calibrate(role)`` after a send the namespace accepted, until the address is armed: one connect that
  must succeed before any refusal of that address is believed;
- ``accepting(role)`` for paired mode: whether the address accepts connections again, so backlog queues
  that left the rotation because it refused them may be used again at once;
- ``refused_by_sdk(role)`` after the SDK itself reported a refused connection: taken as a probe's
  refusal (it is the same evidence), without a connect;
- ``shut_roles()`` and ``accepting_again()`` for the shard pool's watcher: which addresses refuse
  connections now, and which of them accepted one again since it last asked (a probe of each shut one,
  or any other probe that found it open).

A probe opens a TCP connection and closes it at once: no TLS, no AMQP, nothing the namespace could take
for a client. No secret is involved; the address (host and port) is not one.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping

from bridge.core.reachability import (
    AddressState,
    Answer,
    ProbePolicy,
    Reading,
    after_reading,
    answer_of,
    dial_address,
    needs_probe,
    refused,
    reopened,
)
from bridge.core.roles import Role
from bridge.errors import EndpointRefusedError, RefusedMidAttemptError
from bridge.settings import NamespaceSettings, parse_connection_string

logger = logging.getLogger(__name__)

Connect = Callable[[tuple[str, int], float], None]


def tcp_connect(address: tuple[str, int], timeout: float) -> None:
    """Open a TCP connection to ``address`` and close it; raises what ``socket.create_connection`` raises."""
    socket.create_connection(address, timeout=timeout).close()


def address_of(namespace: NamespaceSettings) -> tuple[str, int] | None:
    """Where the SDK dials ``namespace`` (``bridge.core.reachability.dial_address``), None: no probing."""
    development = False
    if namespace.connection_string is not None:
        parts = parse_connection_string(namespace.connection_string.get_secret_value())
        development = parts.get("usedevelopmentemulator", "").lower() == "true"
    return dial_address(
        namespace.endpoint_host,
        websocket=namespace.transport == "amqp_websocket" or namespace.proxy is not None,
        development=development,
        custom_endpoint=namespace.custom_endpoint_address,
        proxied=namespace.proxy is not None,
    )


class ConnectProbe:
    """Probes of the namespaces' addresses for one pool; thread-safe."""

    def __init__(
        self,
        namespaces: Mapping[Role, NamespaceSettings | None],
        policy: ProbePolicy | None = None,
        *,
        connect: Connect = tcp_connect,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy or ProbePolicy()
        self._addresses = {role: address_of(ns) for role, ns in namespaces.items() if ns is not None}
        self._connect, self._clock = connect, clock
        self._states: dict[Role, AddressState] = {}
        self._lock = threading.Lock()
        self._probing: dict[Role, threading.Lock] = {role: threading.Lock() for role in self._addresses}
        self.refusals = 0  # attempts ended (or refused before they started) by a refusal: for tests, status
        self._reopened: set[Role] = set()  # shut addresses seen accepting since ``accepting_again`` asked

    def address(self, role: Role) -> tuple[str, int] | None:
        """The probed address of ``role`` (None: not probed)."""
        return self._addresses.get(role)

    def armed(self, role: Role) -> bool:
        """Whether refusals of ``role``'s address count (it was seen accepting)."""
        with self._lock:
            return self._states.get(role, AddressState()).armed

    def refusing(self, role: Role, what: str) -> EndpointRefusedError | None:
        """The error for a send about to start when ``role``'s address refused a moment ago, else None."""
        with self._lock:
            state = self._states.get(role, AddressState())
        if not refused(state, self._clock(), self.policy):
            return None
        self._count()
        return EndpointRefusedError(
            f"{role} {what}: connection refused"
            f" (connect probe less than {self.policy.refusal_stands:g}s ago)",
            namespace=role,
        )

    def watch(self, role: Role, what: str) -> Callable[[float], BaseException | None] | None:
        """The attempt runner's check for a send to ``role`` still running (None: this role is not probed)."""
        if self._addresses.get(role) is None:
            return None

        def check(left: float) -> BaseException | None:
            state = self._probe(role, reuse=True, left=left)
            if not refused(state, self._clock(), self.policy):
                return None
            self._count()
            return RefusedMidAttemptError(
                f"{role} {what}: connection refused (connect probe while the SDK was still retrying)",
                namespace=role,
            )

        return check

    def accepting(self, role: Role) -> bool:
        """Whether ``role``'s address accepts a TCP connect now (an answer less than ``every`` old is
        reused; False when this role is not probed). Paired mode asks it before it uses again a backlog
        queue that left the rotation because this address refused connections."""
        if self._addresses.get(role) is None:
            return False
        state = self._probe(role, reuse=True)
        return state.last is not None and state.last.answer is Answer.CONNECTED

    def refused_by_sdk(self, role: Role) -> None:
        """Record that the SDK's own connect to ``role`` was refused (a probe's answer, without a connect):
        an armed address is then shut and watched for the moment it accepts again."""
        if self._addresses.get(role) is None:
            return
        with self._lock:
            before = self._states.get(role, AddressState())
            self._states[role] = after_reading(before, Reading(Answer.REFUSED, self._clock()))

    def shut_roles(self) -> list[Role]:
        """The roles whose (armed) address refused its last probe."""
        with self._lock:
            return [role for role, state in self._states.items() if state.shut]

    def accepting_again(self) -> list[Role]:
        """Probe each shut address (an answer less than ``every`` old is reused) and return the roles whose
        address accepted a connection again since the last call, each once."""
        for role in self.shut_roles():
            self._probe(role, reuse=True)
        with self._lock:
            back, self._reopened = sorted(self._reopened), set()
        return back

    def calibrate(self, role: Role) -> None:
        """After a send ``role`` accepted: arm its address with one connect, once (later calls: no I/O)."""
        if self._addresses.get(role) is None or self.armed(role):
            return
        state = self._probe(role, reuse=False)
        if not state.armed:
            logger.warning(
                "connect probe of the %s namespace is off: %s:%s did not accept a connection while the"
                " namespace took a send (%s)",
                role,
                *self._addresses[role] or ("?", "?"),
                state.last.answer.value if state.last else "?",
            )

    def _probe(self, role: Role, *, reuse: bool, left: float | None = None) -> AddressState:
        """Connect to ``role``'s address (one connect at a time; a waiting caller reuses the answer), for at
        most ``left`` seconds when given (the attempt's deadline)."""
        address = self._addresses[role]
        assert address is not None  # callers check
        with self._probing[role]:
            with self._lock:
                state = self._states.get(role, AddressState())
            if reuse and not needs_probe(state, self._clock(), self.policy):
                return state
            try:
                self._connect(
                    address, self.policy.timeout if left is None else min(left, self.policy.timeout)
                )
                answer = answer_of(None)
            except OSError as exc:
                answer = answer_of(type(exc))
            with self._lock:
                before = self._states.get(role, AddressState())
                state = after_reading(before, Reading(answer, self._clock()))
                self._states[role] = state
                if reopened(before, state):
                    self._reopened.add(role)
        if answer is not Answer.CONNECTED:
            logger.debug("connect probe of the %s namespace: %s", role, answer.value)
        return state

    def _count(self) -> None:
        with self._lock:
            self.refusals += 1
