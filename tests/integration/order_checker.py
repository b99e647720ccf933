"""The order checker: after a run, read every namespace with the raw SDK and count, per key, the first
copies that arrived out of sequence.

A producer sends each key's messages in a known order (``Sent``: key → MessageIds in send order). The
checker drains an entity of every namespace given (receive-and-delete; per session for a session entity),
takes the messages in the broker's order (sequence number), and for each key walks its *first* copies —
the first time a MessageId shows up in that namespace; later copies are duplicates, allowed by the
at-least-once contract — counting every first copy whose send index is lower than one already seen for
the key. Zero means every key's messages reached each namespace in the order they were sent. Messages the
checker was not told about (pings, other tests' traffic) are ignored; messages it was told about and did
not find are reported as ``missing``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiveMode

from bridge.embedded.namespaces import LocalNamespace


@dataclass
class OrderReport:
    """What the checker found over every namespace it read."""

    received: int = 0
    first_copies: int = 0
    duplicates: int = 0
    out_of_sequence: int = 0
    missing: set[str] = field(default_factory=set)
    examples: list[str] = field(default_factory=list)
    """A few out-of-sequence cases, ``key: #i after #j in <namespace>``, for the failure message."""

    def __str__(self) -> str:
        return (
            f"received {self.received}, first copies {self.first_copies}, duplicates {self.duplicates}, "
            f"out of sequence {self.out_of_sequence}, missing {len(self.missing)}; {self.examples[:5]}"
        )


def _text(value: object) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def drain(
    ns: LocalNamespace,
    entity: str,
    *,
    expected: int,
    session_ids: Iterable[str] = (),
    timeout: float = 60.0,
    settle: float = 1.0,
) -> list[ServiceBusReceivedMessage]:
    """Receive-and-delete ``entity`` of ``ns`` until ``expected`` arrived (or the timeout), then for another
    ``settle`` seconds so that late extra copies are seen; per session when ``session_ids`` are given.

    Each session has its own client and receiver, on its own thread, open for the whole drain: opening and
    closing a session receiver costs the SDK about 1.5 s, so twenty sessions read one after another (and
    once more to settle) took a minute of waiting where side by side they take seconds.
    """
    sessions: list[str | None] = [*session_ids] or [None]
    got: list[ServiceBusReceivedMessage] = []
    lock = threading.Lock()
    deadline = time.monotonic() + timeout

    def enough() -> bool:
        with lock:
            return len(got) >= expected

    def receive(session: str | None) -> None:
        mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
        with (
            ServiceBusClient.from_connection_string(ns.connection_string, retry_total=1) as client,
            client.get_queue_receiver(entity, receive_mode=mode, session_id=session) as receiver,
        ):
            while True:
                batch = receiver.receive_messages(max_message_count=250, max_wait_time=0.3)
                with lock:
                    got.extend(batch)
                if not batch and (enough() or time.monotonic() >= deadline):
                    break
            end = time.monotonic() + settle
            while time.monotonic() < end:
                batch = receiver.receive_messages(max_message_count=250, max_wait_time=0.3)
                with lock:
                    got.extend(batch)

    with ThreadPoolExecutor(max_workers=len(sessions), thread_name_prefix="order-checker") as pool:
        for done in [pool.submit(receive, session) for session in sessions]:
            done.result()
    return got


def check(
    sent: Mapping[str, Sequence[str]], received: Mapping[str, Sequence[ServiceBusReceivedMessage]]
) -> OrderReport:
    """Count first copies out of sequence per key; ``received`` maps a namespace's name to what it held."""
    position: dict[str, tuple[str, int]] = {}
    for key, ids in sent.items():
        for index, message_id in enumerate(ids):
            position[message_id] = (key, index)
    report = OrderReport()
    seen_anywhere: set[str] = set()
    for namespace, messages in received.items():
        ordered = sorted(messages, key=lambda m: m.sequence_number or 0)
        seen: set[str] = set()
        highest: dict[str, int] = {}
        for message in ordered:
            message_id = _text(message.message_id)
            if message_id not in position:
                continue
            report.received += 1
            if message_id in seen:
                report.duplicates += 1
                continue
            seen.add(message_id)
            if message_id in seen_anywhere:
                report.duplicates += 1
            seen_anywhere.add(message_id)
            report.first_copies += 1
            key, index = position[message_id]
            before = highest.get(key, -1)
            if index < before:
                report.out_of_sequence += 1
                report.examples.append(f"{key}: #{index} after #{before} in {namespace}")
            else:
                highest[key] = index
    report.missing = set(position) - seen_anywhere
    return report


def check_namespaces(
    sent: Mapping[str, Sequence[str]],
    namespaces: Mapping[str, LocalNamespace],
    entity: str,
    *,
    sessions: bool = False,
    timeout: float = 60.0,
) -> OrderReport:
    """Drain ``entity`` in every namespace and check the order (keys are session ids when ``sessions``)."""
    total = sum(len(ids) for ids in sent.values())
    received: dict[str, list[ServiceBusReceivedMessage]] = {}
    remaining = total
    for name, ns in namespaces.items():
        received[name] = drain(
            ns, entity, expected=remaining, session_ids=sent.keys() if sessions else (), timeout=timeout
        )
        known = {m for ids in sent.values() for m in ids}
        remaining = max(0, remaining - len({_text(m.message_id) for m in received[name]} & known))
        timeout = 2.0  # whatever is left is in the other namespaces already
    return check(sent, received)
