"""The connect probe's decisions: where the SDK dials, what a TCP connect there proves, and when to try one.

Why: azure-servicebus reports a refused connection only after its own retry policy has run — with the
bridge's ``retry`` defaults one retry after a 0.4 s backoff, and a connection the namespace dropped takes
its first attempt to notice (0.4 to 0.6 s measured, ``docs/servicebus-sdk.md``) — while a refused TCP connect
is known within one round trip. So an SDK send that has not returned after ``ProbePolicy.after`` seconds
has the namespace's address probed with a plain TCP connect; if the endpoint *refuses*, the namespace is
down now, and the attempt ends at once as an outage (the SDK call is abandoned, as at the attempt
deadline) instead of after the SDK's backoff. A refusal stands for ``refusal_stands`` seconds, during which
a new send to that address fails at once without a connect of its own. Nothing else is evidence: a connect
that times out, an unreachable network, a name that does not resolve, or an endpoint that accepts TCP
and then says nothing (a blackhole: the attempt deadline ends that one) leave the SDK to decide.

A refusal is believed only from an address that was seen accepting while the namespace worked
(``armed``): the address is worked out here the way the SDK works it out, and a mistake there (a port
the SDK does not use, say) must cost the fast path, never cause a failover. A probe that finds the
endpoint connected says nothing beyond "not refused"; any answer is reused for ``every`` seconds by every
send of the process, so a slow, healthy namespace sees at most one TCP connect per ``every`` from a
process, and only while some send of it is slower than ``after``.

Where the SDK dials (azure-servicebus 7.15, ``_common/_configuration.py`` and ``_pyamqp/_connection.py``):
``custom_endpoint_address`` when set (its port, else 5671 for AMQP and 443 for WebSockets); otherwise the
namespace's host on 443 for WebSockets; for AMQP the endpoint's own port when the connection string says
``UseDevelopmentEmulator=true`` (plain AMQP, the local Service Bus), else 5671. Through an HTTP proxy the
SDK never connects to the namespace itself, so there is nothing to probe (``None``): the SDK decides.

The way back: an armed address whose probes are refused is *shut*. While it is, and shards back off,
each worker process connects to it every ``retry.outbox_door_watch`` seconds (``bridge.delivery.
shard_pool``); the first connect that works again (``reopened``) has one backing-off shard of that process
try at once, instead of at the next scout's turn up to ``retry.outbox_scout_interval`` later. A connect is
only a hint that the namespace may be back: that one try is what proves it, and its success wakes every
shard of the deployment as any accepted send does. An answer other than a refusal or a connect (a
blackhole's timeout: ``Answer.UNKNOWN``) ends the watch: the watcher must not wait on a silent address.

Pure: times are arguments, nothing here opens a socket (``bridge.servicebus.connect_probe`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from urllib.parse import urlsplit

AMQPS_PORT = 5671
WEBSOCKET_PORT = 443


class Answer(StrEnum):
    """What one TCP connect to a namespace's address found."""

    REFUSED = "refused"
    CONNECTED = "connected"
    UNKNOWN = "unknown"


def answer_of(error: type[BaseException] | None) -> Answer:
    """The answer of a connect that raised ``error`` (None: it connected). Only a refusal is a refusal."""
    if error is None:
        return Answer.CONNECTED
    if issubclass(error, ConnectionRefusedError):
        return Answer.REFUSED
    return Answer.UNKNOWN


def dial_address(
    endpoint_host: str,
    *,
    websocket: bool,
    development: bool,
    custom_endpoint: str | None,
    proxied: bool,
) -> tuple[str, int] | None:
    """``(host, port)`` the SDK opens its TCP connection to, or None when it goes through a proxy.

    ``endpoint_host`` is the namespace's ``host[:port]``; ``development`` the connection string's
    ``UseDevelopmentEmulator=true``; ``websocket`` AMQP over WebSockets (``transport`` or a proxy).
    """
    if proxied:
        return None
    default = WEBSOCKET_PORT if websocket else AMQPS_PORT
    if custom_endpoint:
        parts = urlsplit(custom_endpoint if "//" in custom_endpoint else f"sb://{custom_endpoint}")
        if not parts.hostname:
            return None
        return parts.hostname, parts.port or default
    parts = urlsplit(f"sb://{endpoint_host}")
    if not parts.hostname:
        return None
    if development and not websocket and parts.port:
        return parts.hostname, parts.port
    return parts.hostname, default


@dataclass(frozen=True)
class ProbePolicy:
    """When a send's address is probed and how long an answer stands.

    ``after``: seconds an SDK send may run before its address is probed (a healthy batched send on a
    warm link takes milliseconds); ``every``: seconds between further probes while it still runs, and
    how long any answer is reused by every send of the process (at most one connect per ``every``);
    ``refusal_stands``: seconds a refusal makes new sends fail without being tried; ``timeout``: the
    longest a connect may take (a connect that times out proves nothing).
    """

    after: float = 0.05
    every: float = 0.05
    refusal_stands: float = 0.25
    timeout: float = 0.5

    def __post_init__(self) -> None:
        if min(self.after, self.every, self.refusal_stands, self.timeout) <= 0:
            raise ValueError("probe times must be positive")


@dataclass(frozen=True)
class Reading:
    """One probe's answer and when it came."""

    answer: Answer
    at: float


@dataclass(frozen=True)
class AddressState:
    """What the process knows of one address: whether its refusals count, the last probe, and whether it
    is shut (armed, and refusing since: watched for the moment it accepts again)."""

    armed: bool = False
    last: Reading | None = None
    shut: bool = False


def after_reading(state: AddressState, reading: Reading) -> AddressState:
    """The state after a probe; a connect that worked arms the address (its refusals count from then on),
    a refusal of an armed address shuts it, any other answer opens it (see the module docstring)."""
    return replace(
        state,
        armed=state.armed or reading.answer is Answer.CONNECTED,
        last=reading,
        shut=state.armed and reading.answer is Answer.REFUSED,
    )


def reopened(before: AddressState, after: AddressState) -> bool:
    """Whether the probe that made ``after`` found a shut address accepting connections again."""
    return before.shut and after.last is not None and after.last.answer is Answer.CONNECTED


def refused(state: AddressState, now: float, policy: ProbePolicy) -> bool:
    """Whether the address counts as refusing now: armed, and refused by a probe less than
    ``refusal_stands`` ago."""
    last = state.last
    return (
        state.armed
        and last is not None
        and last.answer is Answer.REFUSED
        and 0 <= now - last.at < policy.refusal_stands
    )


def needs_probe(state: AddressState, now: float, policy: ProbePolicy) -> bool:
    """Whether a waiting send should connect itself rather than reuse the last answer."""
    last = state.last
    return last is None or not 0 <= now - last.at < policy.every
