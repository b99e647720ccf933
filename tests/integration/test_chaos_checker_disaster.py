"""The chaos checker's ``broker`` order rule against a real local namespace that loses everything and is
re-created, as the chaos run's ``disaster`` does (outage, wipe, restart that declares the entities again).

The rule splits a namespace's copies into numbering series where its sequence numbers fall back in
enqueued-time order (``bench/chaos_checker._series``). This checks what that relies on with the real
emulator and the unmodified SDK: one namespace numbers a topic's messages in the order it enqueues them,
the re-created one numbers from 1 again, and the old namespace's last copies — handed after a boundary
taken from ``chaos.log`` (whole seconds, written before the outage) — are not judged against the new ones,
the seed-1 finding of ``docs/findings.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from bench.chaos_checker import _order
from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import receive, sb_client

pytestmark = pytest.mark.timeout(120)

TOPIC, SUBSCRIPTION, KEY = "chaos-active", "all", "redis-0"
RUN = {"entities": [{"name": TOPIC, "mode": "active", "subscription": SUBSCRIPTION}]}


def send(ns: LocalNamespace, seqs: range) -> None:
    """Messages of one key with their per-key sequence, one transfer each (as separate sends arrive)."""
    with sb_client(ns) as client, client.get_topic_sender(TOPIC) as sender:
        for seq in seqs:
            props = {"chaos_key": KEY, "chaos_seq": seq}
            sender.send_messages(
                ServiceBusMessage(
                    f"m{seq}", message_id=f"m{seq}", partition_key=KEY, application_properties=props
                )
            )


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def hand(ns: LocalNamespace, count: int) -> list[dict[str, Any]]:
    """Receive and complete ``count`` copies, each recorded as ``bench/chaos_handler.py`` records a call."""
    records = []
    with sb_client(ns) as client, client.get_subscription_receiver(TOPIC, SUBSCRIPTION) as receiver:
        for message in receive(receiver, count):
            # The SDK hands string keys and values back as bytes (the bridge's receiver decodes them).
            props = {_text(k): _text(v) for k, v in (message.application_properties or {}).items()}
            assert message.enqueued_time_utc is not None
            records.append(
                {
                    "id": message.message_id,
                    "entity": TOPIC,
                    "ns": "secondary",
                    "key": props["chaos_key"],
                    "seq": props["chaos_seq"],
                    "bseq": message.sequence_number,
                    "enq": message.enqueued_time_utc.timestamp(),
                    "t": time.time(),
                }
            )
            receiver.complete_message(message)
    return records


def test_copies_of_a_re_created_namespace_are_judged_apart_from_the_old_ones(
    namespace_factory: Callable[..., LocalNamespace], tmp_path: Path
) -> None:
    entities = tmp_path / "namespace-entities.toml"
    entities.write_text(f'[topics."{TOPIC}"]\n[topics."{TOPIC}".subscriptions."{SUBSCRIPTION}"]\n')
    ns = namespace_factory("secondary", persistent=True, auto_create=True, entities_file=entities)
    # Given a key's messages 0-5 handed from the secondary, 3-5 after the moment chaos.log would give
    # as the disaster's (its line is written, in whole seconds, before the outage is switched on)
    send(ns, range(0, 3))
    logged = time.time()
    send(ns, range(3, 6))
    records = hand(ns, 6)
    # When the secondary loses everything and is re-created, as the chaos run's disaster does it
    ns.control.outage()
    recorded = time.time()
    ns.control.disaster()
    ns.restart()
    # And the key's next messages are handed from the re-created namespace
    send(ns, range(6, 10))
    records += hand(ns, 4)
    # Then the re-created namespace numbered from 1 again, and both series rose with the enqueued time
    old, new = records[:6], records[6:]
    assert sorted(r["bseq"] for r in new) == [1, 2, 3, 4]
    by_time = [r["bseq"] for r in sorted(old, key=lambda r: (r["enq"], r["bseq"]))]
    assert by_time == sorted(by_time)
    assert max(r["enq"] for r in old) < recorded < min(r["enq"] for r in new)
    calls = {r["id"]: [r] for r in records}
    # And no copy is out of order, whether the disaster is recorded exactly, a second early, or late
    for reset in (recorded, logged, recorded + 60):
        counts, examples = _order(calls, {**RUN, "resets": {"secondary": [reset]}})
        assert counts == {"broker": 0, "session_handler": 0, "sequence_restart": 0}, examples
    # And a restart of the numbering that no recorded disaster explains is reported
    counts, examples = _order(calls, {**RUN, "resets": {}})
    assert counts["sequence_restart"] == 1 and counts["broker"] == 0, examples
