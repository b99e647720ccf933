"""Batch packing (bridge.servicebus.sending) with real SDK batches and a recording channel.

The channel stands in for the network only (the pool's real channel is exercised in
tests/integration/test_servicebus_send.py); batches, encoding and size limits are the SDK's own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch

from bridge.errors import MessagePermanentError, NamespaceError, NamespaceOutageError
from bridge.servicebus.sending import SendResult, SharedBatches, prepack, send_in_batches

LIMIT = 4096


class Recorder:
    """Creates real batches of ``limit`` bytes, records what is sent, fails when ``fail`` says so."""

    def __init__(
        self, fail: Callable[[list[str]], NamespaceError | None] = lambda ids: None, limit: int = LIMIT
    ) -> None:
        self.sent: list[list[str]] = []
        self.batches: list[ServiceBusMessageBatch] = []
        self.made: list[int] = []  # the batches this channel made (ids)
        self.fail = fail
        self.limit = limit

    def new_batch(self) -> ServiceBusMessageBatch:
        batch = ServiceBusMessageBatch(max_size_in_bytes=self.limit)
        self.made.append(id(batch))
        return batch

    def send_batch(self, batch: ServiceBusMessageBatch) -> None:
        ids = [str(m.message_id) for m in batch._messages]  # the batch's own record of what it holds
        error = self.fail(ids)
        if error is not None:
            raise error
        self.sent.append(ids)
        self.batches.append(batch)


def both(
    primary: Recorder,
    secondary: Recorder,
    messages: list[ServiceBusMessage],
    shared: SharedBatches | None = None,
) -> tuple[SendResult, SendResult]:
    """The two namespaces' sends of the same messages with one ``SharedBatches``, at the same time."""
    shared = shared or SharedBatches()
    results: dict[str, SendResult] = {}

    def send(name: str, channel: Recorder) -> None:
        results[name] = send_in_batches(channel, messages, namespace=name, shared=shared)

    thread = threading.Thread(target=send, args=("secondary", secondary))
    thread.start()
    send("primary", primary)
    thread.join(10)
    return results["primary"], results["secondary"]


def msgs(*sizes: int) -> list[ServiceBusMessage]:
    return [ServiceBusMessage(b"x" * size, message_id=str(i)) for i, size in enumerate(sizes)]


def test_packs_in_order_into_few_batches() -> None:
    channel = Recorder()
    result = send_in_batches(channel, msgs(*[1000] * 7))
    assert result.accepted == list(range(7)) and result.failed == {}
    # Three 1000-byte messages fill a 4096-byte batch (encoding overhead), so 3 + 3 + 1
    assert result.batches == len(channel.sent) == 3
    assert channel.sent == [["0", "1", "2"], ["3", "4", "5"], ["6"]]


def test_oversized_message_fails_alone_and_others_go_on() -> None:
    channel = Recorder()
    result = send_in_batches(channel, msgs(10, LIMIT * 2, 10), namespace="primary")
    assert result.accepted == [0, 2]
    assert isinstance(result.failed[1], MessagePermanentError) and result.failed[1].namespace == "primary"
    assert channel.sent == [["0", "2"]]


def test_unencodable_message_fails_alone() -> None:
    bad = ServiceBusMessage(b"x", message_id="1", application_properties={"p": object()})  # type: ignore[dict-item]
    result = send_in_batches(Recorder(), [*msgs(1), bad, ServiceBusMessage(b"y", message_id="2")])
    assert result.accepted == [0, 2] and isinstance(result.failed[1], MessagePermanentError)


def test_failed_batch_fails_it_and_everything_after() -> None:
    outage = NamespaceOutageError("down", namespace="primary")
    channel = Recorder(fail=lambda ids: outage if "3" in ids else None)
    result = send_in_batches(channel, msgs(*[1000] * 7))
    assert result.accepted == [0, 1, 2]
    assert result.failed == dict.fromkeys(range(3, 7), outage)
    assert channel.sent == [["0", "1", "2"]]  # nothing after the failed batch was sent


def test_permanent_batch_refusal_is_retried_one_by_one() -> None:
    # The broker refuses any batch holding message 1 as too large (its own limit is lower than the link's)
    refusal = MessagePermanentError("size exceeded", namespace="primary")
    channel = Recorder(fail=lambda ids: refusal if "1" in ids else None)
    result = send_in_batches(channel, msgs(10, 10, 10, 10))
    assert result.accepted == [0, 2, 3] and result.failed == {1: refusal}
    assert channel.sent == [["0"], ["2"], ["3"]]


def test_batch_creation_failure_fails_everything() -> None:
    class NoBatches(Recorder):
        def new_batch(self) -> ServiceBusMessageBatch:
            raise NamespaceOutageError("refused")

    result = send_in_batches(NoBatches(), msgs(1, 2))
    assert result.accepted == [] and set(result.failed) == {0, 1}


def test_empty_send() -> None:
    result = send_in_batches(Recorder(), [])
    assert result.ok and result.accepted == [] and result.batches == 0


def test_with_keys_a_message_refused_for_good_stops_the_later_messages_of_its_key() -> None:
    # Message 1 (key "k") is too large for any batch: k's later message 3 is not sent past it, the other
    # keys' and the keyless messages go on
    channel = Recorder()
    sizes = msgs(10, LIMIT * 2, 10, 10, 10)
    result = send_in_batches(channel, sizes, namespace="secondary", keys=["k", "k", "n", "k", None])
    assert result.accepted == [0, 2, 4] and set(result.failed) == {1, 3}
    assert isinstance(result.failed[3], MessagePermanentError) and "not sent" in str(result.failed[3])
    assert channel.sent == [["0", "2", "4"]]


def test_with_keys_a_broker_refusal_stops_the_later_messages_of_its_key() -> None:
    # The broker refuses any batch holding message 1: sent one by one, k's later message 2 is not sent
    refusal = MessagePermanentError("size exceeded", namespace="secondary")
    channel = Recorder(fail=lambda ids: refusal if "1" in ids else None)
    result = send_in_batches(channel, msgs(10, 10, 10, 10), keys=["k", "k", "k", "n"])
    assert result.accepted == [0, 3] and result.failed[1] is refusal and 2 in result.failed
    assert channel.sent == [["0"], ["3"]]


# ---- one packing for two namespaces (active mode's copies) -------------------------------------------------
def test_shared_batches_are_packed_once_and_sent_to_both_namespaces() -> None:
    primary, secondary = Recorder(), Recorder()
    first, second = both(primary, secondary, msgs(*[1000] * 7))
    assert first.accepted == second.accepted == list(range(7)) and first.batches == second.batches == 3
    assert primary.sent == secondary.sent == [["0", "1", "2"], ["3", "4", "5"], ["6"]]
    # The very same batch objects: each message was encoded once, not once per namespace.
    assert [id(b) for b in primary.batches] == [id(b) for b in secondary.batches]


def test_shared_batches_carry_the_messages_that_fail_for_good_to_both_namespaces() -> None:
    bad = ServiceBusMessage(b"x", message_id="2", application_properties={"p": object()})  # type: ignore[dict-item]
    messages = [*msgs(10, LIMIT * 2), bad, ServiceBusMessage(b"y", message_id="3")]
    first, second = both(Recorder(), Recorder(), messages)
    for result, name in ((first, "primary"), (second, "secondary")):
        assert result.accepted == [0, 3] and set(result.failed) == {1, 2}
        assert all(
            isinstance(e, MessagePermanentError) and e.namespace == name for e in result.failed.values()
        )
        assert "too large" in str(result.failed[1]) and "cannot be encoded" in str(result.failed[2])


def test_a_namespace_whose_link_takes_smaller_batches_packs_its_own() -> None:
    primary, secondary = Recorder(limit=LIMIT * 4), Recorder()
    first, second = both(primary, secondary, msgs(*[1000] * 7))
    assert first.accepted == second.accepted == list(range(7))
    # Whichever packed first, each namespace's batches fit its own limit and keep the order.
    assert secondary.sent == [["0", "1", "2"], ["3", "4", "5"], ["6"]]
    assert [i for ids in primary.sent for i in ids] == [str(i) for i in range(7)]
    assert all(b.max_size_in_bytes <= LIMIT for b in secondary.batches)


def test_a_failure_in_one_namespace_changes_nothing_in_the_other() -> None:
    outage = NamespaceOutageError("down", namespace="primary")
    refusal = MessagePermanentError("size exceeded", namespace="secondary")
    primary = Recorder(fail=lambda ids: outage if "3" in ids else None)
    secondary = Recorder(fail=lambda ids: refusal if "1" in ids else None)
    first, second = both(primary, secondary, msgs(*[1000] * 7))
    assert first.accepted == [0, 1, 2] and first.failed == dict.fromkeys(range(3, 7), outage)
    # The secondary's refused batch is sent one by one there, as when it sends alone.
    assert second.accepted == [0, 2, 3, 4, 5, 6] and second.failed == {1: refusal}
    assert secondary.sent == [["0"], ["2"], ["3", "4", "5"], ["6"]]


def test_batches_packed_ahead_are_the_ones_both_namespaces_send() -> None:
    messages = msgs(*[1000] * 7)
    shared = prepack(messages, LIMIT)
    primary, secondary = Recorder(), Recorder()
    first, second = both(primary, secondary, messages, shared)
    assert first.accepted == second.accepted == list(range(7)) and first.batches == second.batches == 3
    assert primary.sent == secondary.sent == [["0", "1", "2"], ["3", "4", "5"], ["6"]]
    # The very batches packed ahead: the same objects for both, none packed by either send.
    sent = [id(b) for b in primary.batches]
    assert sent == [id(b) for b in secondary.batches]
    assert not set(sent) & {*primary.made, *secondary.made}


def test_messages_that_fail_for_good_when_packed_ahead_fail_as_when_packed_in_line() -> None:
    bad = ServiceBusMessage(b"x", message_id="2", application_properties={"p": object()})  # type: ignore[dict-item]
    messages = [*msgs(10, LIMIT * 2), bad, ServiceBusMessage(b"y", message_id="3")]
    first, second = both(Recorder(), Recorder(), messages, prepack(messages, LIMIT))
    for result, name in ((first, "primary"), (second, "secondary")):
        assert result.accepted == [0, 3] and set(result.failed) == {1, 2}
        assert all(
            isinstance(e, MessagePermanentError) and e.namespace == name for e in result.failed.values()
        )
        assert "too large" in str(result.failed[1]) and "cannot be encoded" in str(result.failed[2])


def test_links_that_take_smaller_batches_than_those_packed_ahead_pack_their_own() -> None:
    messages = msgs(*[1000] * 7)
    primary, secondary = Recorder(), Recorder()
    first, second = both(primary, secondary, messages, prepack(messages, LIMIT * 4))
    assert first.accepted == second.accepted == list(range(7))
    assert primary.sent == secondary.sent == [["0", "1", "2"], ["3", "4", "5"], ["6"]]
    assert all(b.max_size_in_bytes <= LIMIT for b in [*primary.batches, *secondary.batches])
