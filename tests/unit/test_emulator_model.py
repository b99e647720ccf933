"""The local Service Bus's broker model without a network: message store, sessions, SQL filters, replay.

Everything here is pure: ``now`` is passed in, lock tokens come from a counter, and persistence is driven
with in-memory records passed through JSON the way the write-ahead log stores them.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from bridge.emulator.errors import (
    ArgumentError,
    MessageLockLostError,
    MessageNotFoundError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)
from bridge.emulator.model import persistence
from bridge.emulator.model.descriptions import (
    CorrelationRuleFilter,
    EntityKind,
    QueueDescription,
    RuleDescription,
    SqlRuleFilter,
    SubscriptionDescription,
    TopicDescription,
)
from bridge.emulator.model.filters import compile_filter
from bridge.emulator.model.messages import Delivery, IncomingMessage, MessageState, StoredMessage
from bridge.emulator.model.namespace import Namespace
from bridge.emulator.model.store import EXPIRED_REASON, MAX_DELIVERY_REASON, MessageStore, StoreOptions

T0 = 1_700_000_000.0
LOCK = 30.0


def tokens() -> Callable[[], uuid.UUID]:
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def make_store(**options: Any) -> MessageStore:
    opts = StoreOptions(lock_duration=LOCK, **options)
    return MessageStore("q1", opts, token_factory=tokens())


def token(delivery: Delivery) -> uuid.UUID:
    assert delivery.lock_token is not None, "taken in RECEIVE_AND_DELETE mode"
    return delivery.lock_token


def put(store: MessageStore, seq: int, now: float = T0, **fields: Any) -> StoredMessage:
    msg = StoredMessage(seq=seq, raw=b"m%d" % seq, enqueued_at=now, **fields)
    store.insert(msg, now)
    return msg


# ---- locks and settlement ---------------------------------------------------------------------------------


def test_peek_lock_locks_for_the_lock_duration_and_complete_removes() -> None:
    store = make_store()
    put(store, 1)
    put(store, 2)

    [first] = store.take(1, T0, peek_lock=True)

    assert first.message.seq == 1
    assert first.lock_token is not None
    assert first.locked_until == T0 + LOCK
    assert store.take(5, T0, peek_lock=True)[0].message.seq == 2  # the locked one is not handed out again
    store.complete(first.lock_token, T0 + 1)
    assert 1 not in store.messages
    with pytest.raises(MessageLockLostError):
        store.complete(first.lock_token, T0 + 1)


def test_receive_and_delete_removes_at_once() -> None:
    store = make_store()
    put(store, 1)

    [delivery] = store.take(1, T0, peek_lock=False)

    assert delivery.lock_token is None
    assert store.messages == {}


@pytest.mark.parametrize(
    ("settle", "delivery_count", "ready_again"),
    [
        ("abandon", 1, True),
        ("release", 0, True),  # given back unseen: not a failed delivery
        ("defer", 0, False),  # only receive-by-sequence-number reaches it
    ],
)
def test_giving_a_message_back(settle: str, delivery_count: int, ready_again: bool) -> None:
    store = make_store()
    put(store, 1)
    [delivery] = store.take(1, T0, peek_lock=True)
    assert delivery.lock_token is not None

    getattr(store, settle)(delivery.lock_token, T0 + 1)

    msg = store.messages[1]
    assert msg.delivery_count == delivery_count
    assert msg.lock_token is None
    again = store.take(1, T0 + 2, peek_lock=True)
    assert [d.message.seq for d in again] == ([1] if ready_again else [])


def test_deferred_message_is_received_by_sequence_number_only() -> None:
    store = make_store()
    put(store, 1)
    [delivery] = store.take(1, T0, peek_lock=True)
    assert delivery.lock_token is not None
    store.defer(delivery.lock_token, T0)

    [again] = store.receive_deferred([1], T0 + 1, peek_lock=True)

    assert again.message.state is MessageState.DEFERRED
    with pytest.raises(MessageNotFoundError):
        store.receive_deferred([1, 99], T0 + 1, peek_lock=True)


@pytest.mark.parametrize("max_delivery_count", [1, 2, 3])
def test_max_delivery_count_dead_letters(max_delivery_count: int) -> None:
    # Given a message that every receiver abandons
    store = make_store(max_delivery_count=max_delivery_count)
    put(store, 1)

    # When it has been delivered max_delivery_count times
    for attempt in range(max_delivery_count):
        [delivery] = store.take(1, T0 + attempt, peek_lock=True)
        assert delivery.delivery_count == attempt
        assert delivery.lock_token is not None
        store.abandon(delivery.lock_token, T0 + attempt)

    # Then it sits in the dead-letter queue with the reason, and nowhere else
    assert store.messages == {}
    assert store.dlq is not None
    dead = store.dlq.messages[1]
    assert dead.dead_letter_reason == MAX_DELIVERY_REASON
    assert store.counts() == (0, 0, 1)


def test_expired_lock_counts_a_delivery_and_refuses_the_late_settlement() -> None:
    store = make_store(max_delivery_count=10)
    put(store, 1)
    [delivery] = store.take(1, T0, peek_lock=True)
    assert delivery.lock_token is not None

    with pytest.raises(MessageLockLostError):
        store.complete(delivery.lock_token, T0 + LOCK + 1)

    assert store.messages[1].delivery_count == 1
    assert [d.message.seq for d in store.take(1, T0 + LOCK + 1, peek_lock=True)] == [1]


def test_tick_releases_expired_locks() -> None:
    store = make_store()
    put(store, 1)
    store.take(1, T0, peek_lock=True)

    assert store.next_deadline() == T0 + LOCK
    assert store.tick(T0 + LOCK - 1) is False
    assert store.tick(T0 + LOCK) is True

    assert store.messages[1].delivery_count == 1
    assert store.messages[1].lock_token is None


def test_renew_extends_the_lock() -> None:
    store = make_store()
    put(store, 1)
    [delivery] = store.take(1, T0, peek_lock=True)
    assert delivery.lock_token is not None

    until = store.renew(delivery.lock_token, T0 + 20)

    assert until == T0 + 20 + LOCK
    store.tick(T0 + LOCK + 1)  # the first lock's expiry entry is stale now
    store.complete(delivery.lock_token, T0 + LOCK + 1)


# ---- time to live and scheduling --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dead_letter_on_expiration", "counts"),
    [(False, (0, 0, 0)), (True, (0, 0, 1))],
)
def test_ttl_expiry(dead_letter_on_expiration: bool, counts: tuple[int, int, int]) -> None:
    store = make_store(dead_letter_on_expiration=dead_letter_on_expiration)
    put(store, 1, time_to_live=10.0)

    assert store.tick(T0 + 9) is False
    assert store.counts() == (1, 0, 0)
    woke = store.tick(T0 + 10)

    assert woke is dead_letter_on_expiration  # a dead-lettered message is ready in the DLQ
    assert store.counts() == counts
    if dead_letter_on_expiration:
        assert store.dlq is not None
        assert store.dlq.messages[1].dead_letter_reason == EXPIRED_REASON


def test_entity_default_ttl_caps_the_message_ttl() -> None:
    store = make_store(default_ttl=5.0)
    msg = put(store, 1, time_to_live=60.0)

    assert msg.time_to_live == 5.0
    assert msg.expires_at == T0 + 5.0


def test_expired_message_is_not_handed_out() -> None:
    store = make_store()
    put(store, 1, time_to_live=10.0)
    put(store, 2)

    taken = store.take(5, T0 + 11, peek_lock=True)  # before any tick

    assert [d.message.seq for d in taken] == [2]
    assert 1 not in store.messages


def test_scheduled_message_activates_at_its_time() -> None:
    store = make_store()
    put(store, 1, scheduled_at=T0 + 60)

    assert store.messages[1].state is MessageState.SCHEDULED
    assert store.counts() == (0, 1, 0)
    assert store.take(1, T0 + 59, peek_lock=True) == []
    assert store.next_deadline() == T0 + 60

    assert store.tick(T0 + 60) is True
    assert [d.message.seq for d in store.take(1, T0 + 60, peek_lock=True)] == [1]


def test_scheduled_message_ttl_runs_from_its_scheduled_time() -> None:
    store = make_store()
    msg = put(store, 1, scheduled_at=T0 + 60, time_to_live=10.0)

    assert msg.expires_at == T0 + 70


def test_cancel_scheduled_ignores_unknown_numbers() -> None:
    store = make_store()
    put(store, 1, scheduled_at=T0 + 60)
    put(store, 2)

    store.cancel_scheduled([1, 2, 99])

    assert set(store.messages) == {2}  # an active message is not cancelled


# ---- sessions ---------------------------------------------------------------------------------------------


def session_store() -> MessageStore:
    store = make_store(requires_session=True)
    put(store, 1, session_id="b")
    put(store, 2, session_id="a")
    put(store, 3, session_id="b")
    return store


def test_next_available_session_is_the_one_with_the_oldest_message() -> None:
    store = session_store()

    first, until = store.lock_session(None, "r1", T0)
    second, _ = store.lock_session(None, "r2", T0)

    assert (first, until, second) == ("b", T0 + LOCK, "a")
    with pytest.raises(SessionCannotBeLockedError):
        store.lock_session(None, "r3", T0)  # both are locked


def test_session_receiver_gets_its_session_only_in_order() -> None:
    store = session_store()
    store.lock_session("b", "r1", T0)

    taken = store.take(10, T0, peek_lock=True, session_id="b")

    assert [d.message.seq for d in taken] == [1, 3]
    assert store.take(10, T0, peek_lock=True) == []  # no sessionless queue in a session entity


@pytest.mark.parametrize(
    ("owner", "at", "locks"),
    [
        ("r2", T0 + 1, False),  # held by someone else
        ("r1", T0 + 1, True),  # the holder may lock again
        ("r2", T0 + LOCK + 1, True),  # the lock ran out
    ],
)
def test_named_session_lock(owner: str, at: float, locks: bool) -> None:
    store = session_store()
    store.lock_session("a", "r1", T0)

    if locks:
        assert store.lock_session("a", owner, at) == ("a", at + LOCK)
    else:
        with pytest.raises(SessionCannotBeLockedError):
            store.lock_session("a", owner, at)


def test_session_lock_lost_after_expiry() -> None:
    store = session_store()
    store.lock_session("a", "r1", T0)

    assert store.renew_session("a", "r1", T0 + 10) == T0 + 10 + LOCK
    with pytest.raises(SessionLockLostError):
        store.renew_session("a", "r1", T0 + 10 + LOCK + 1)
    with pytest.raises(SessionLockLostError):
        store.renew_session("a", "someone-else", T0 + 11)


def test_releasing_a_session_redelivers_its_locked_messages_first() -> None:
    # Given a receiver that holds session b and one unsettled message of it
    store = session_store()
    store.lock_session("b", "r1", T0)
    store.take(1, T0, peek_lock=True, session_id="b")

    # When its link closes
    assert store.release_session("b", "stale-owner", T0 + 1) is False
    assert store.release_session("b", "r1", T0 + 1) is True

    # Then the next holder gets that message again, counted, ahead of later ones
    sid, _ = store.lock_session(None, "r2", T0 + 2)
    taken = store.take(10, T0 + 2, peek_lock=True, session_id=sid)
    assert sid == "b"
    assert [(d.message.seq, d.delivery_count) for d in taken] == [(1, 1), (3, 0)]


def test_session_state_set_and_cleared() -> None:
    store = session_store()

    store.set_session_state("a", b"state")
    assert store.sessions.state == {"a": b"state"}
    store.set_session_state("a", None)
    assert store.sessions.state == {}


# ---- SQL filters ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "props", "matches"),
    [
        ("1=1", {}, True),
        ("1=0", {}, False),
        ("1 = 1", {}, True),
        ("color = 'red'", {"color": "red"}, True),
        ("color = 'red'", {"color": "blue"}, False),
        ("color = 'red'", {}, False),  # a missing property compares as NULL: no match
        ("user.color = 'red'", {"color": "red"}, True),
        ("[color] <> 'red'", {"color": "blue"}, True),
        ("color != 'red'", {"color": "red"}, False),
        ("sys.Label = 'hi'", {"sys.Label": "hi"}, True),
        ("sys.label = 'hi'", {"sys.Label": "hi"}, True),  # system names are case-insensitive
        ("sys.CorrelationId = 'c1'", {"sys.CorrelationId": "c2"}, False),
        ("quantity > 5", {"quantity": 6}, True),
        ("quantity >= 5.5", {"quantity": 5}, False),
        ("quantity < 5 OR color = 'red'", {"quantity": 9, "color": "red"}, True),
        ("quantity < 5 AND color = 'red'", {"quantity": 9, "color": "red"}, False),
        ("NOT (color = 'red')", {"color": "red"}, False),
        ("color IS NULL", {}, True),
        ("color IS NOT NULL", {"color": "red"}, True),
        ("flag = TRUE", {"flag": True}, True),
        ("name = 'it''s'", {"name": "it's"}, True),
        ("quantity > 'abc'", {"quantity": 1}, False),  # incomparable types do not match
    ],
)
def test_sql_filter(sql: str, props: dict[str, Any], matches: bool) -> None:
    assert compile_filter(SqlRuleFilter(sql))(props) is matches


@pytest.mark.parametrize(
    "sql",
    [
        "",
        "color LIKE 'r%'",
        "color IN ('red', 'blue')",
        "quantity + 1 = 2",
        "color =",
        "(color = 'red'",
        "color IS 5",
        "1=1 1=1",
        "EXISTS(color)",
        "TRUE",  # a bare boolean literal is not a predicate in this subset
    ],
)
def test_unsupported_sql_is_refused(sql: str) -> None:
    with pytest.raises(ArgumentError):
        compile_filter(SqlRuleFilter(sql))


def test_correlation_filter_compares_every_set_field() -> None:
    predicate = compile_filter(CorrelationRuleFilter(label="hi", properties={"color": "red"}))

    assert predicate({"sys.Label": "hi", "color": "red"})
    assert not predicate({"sys.Label": "hi", "color": "blue"})
    assert not predicate({"color": "red"})


# ---- persistence ------------------------------------------------------------------------------------------

Record = tuple[str, dict[str, Any], list[bytes]]


def as_logged(record: Record) -> Record:
    """A record as the write-ahead log gives it back: fields through JSON, blobs as bytes."""
    kind, fields, blobs = record
    return kind, json.loads(json.dumps(fields)), list(blobs)


def busy_namespace(journal: list[Record]) -> Namespace:
    ns = Namespace("ns", token_factory=tokens())
    ns.set_journal(lambda kind, fields, blobs: journal.append(as_logged((kind, fields, blobs))))
    ns.create(QueueDescription(name="q1", requires_duplicate_detection=True), T0)
    ns.create(QueueDescription(name="sq", requires_session=True), T0)
    ns.create(TopicDescription(name="t1"), T0)
    ns.create(SubscriptionDescription(topic_name="t1", name="all"), T0)
    ns.create(SubscriptionDescription(topic_name="t1", name="red"), T0)
    ns.create(RuleDescription("t1", "red", "red", SqlRuleFilter("color = 'red'")), T0)
    ns.delete(EntityKind.RULE, "t1/Subscriptions/red/Rules/$Default")
    # A subscription made with its own first rule, and one whose $Default was changed
    ns.create(
        SubscriptionDescription("t1", "blue"), T0, RuleDescription("", "", "b", CorrelationRuleFilter("b"))
    )
    ns.create(SubscriptionDescription(topic_name="t1", name="green"), T0)
    ns.update(RuleDescription("t1", "green", "$Default", SqlRuleFilter("color = 'green'")), T0)

    ns.send("q1", [IncomingMessage(raw=b"q%d" % i, message_id=f"m{i}") for i in range(6)], T0)
    ns.send("q1", [IncomingMessage(raw=b"dup", message_id="m0")], T0 + 1)  # dropped duplicate
    ns.send("q1", [IncomingMessage(raw=b"later", scheduled_at=T0 + 3600)], T0)
    ns.send("sq", [IncomingMessage(raw=b"s", session_id="s1")], T0)
    ns.send(
        "t1",
        [
            IncomingMessage(raw=b"r", properties={"color": "red"}),
            IncomingMessage(raw=b"b", properties={"color": "blue"}),
        ],
        T0,
    )

    q1 = ns.store("q1")
    completed, dead, deferred, abandoned = q1.take(4, T0 + 2, peek_lock=True)
    q1.complete(token(completed), T0 + 2)
    q1.dead_letter(token(dead), T0 + 2, "bad", "really bad")
    q1.defer(token(deferred), T0 + 2)
    q1.rewrite(token(abandoned), T0 + 2, lambda raw: raw + b"+modified")  # properties set on settling
    q1.abandon(token(abandoned), T0 + 2)
    ns.store("sq").set_session_state("s1", b"state")
    return ns


def picture(ns: Namespace) -> dict[str, Any]:
    """What a restart must keep: entities, counts, sequence counters, messages and session state."""
    out: dict[str, Any] = {}
    for kind in (EntityKind.QUEUE, EntityKind.TOPIC):
        for desc in ns.list(kind):
            out[desc.name] = ns.runtime(kind, desc.name).total_message_count
    for desc in ns.list(EntityKind.SUBSCRIPTION, "t1"):
        path = f"t1/Subscriptions/{desc.name}"
        out[path] = ns.runtime(EntityKind.SUBSCRIPTION, path).total_message_count
        rules = ns.list(EntityKind.RULE, path)
        out[path + " rules"] = sorted((r.name, repr(r)) for r in rules if isinstance(r, RuleDescription))
    for store in ns.stores():
        for sub in (store, store.dlq):
            assert sub is not None
            out[sub.path + " messages"] = sorted(
                (m.seq, m.raw, m.state.value, m.delivery_count, m.dead_letter_reason)
                for m in sub.messages.values()
            )
        out[store.path + " sessions"] = dict(store.sessions.state)
    out["last_seq"] = {t.desc.name: t.last_seq for t in [*ns.queues.values(), *ns.topics.values()]}
    return out


def test_snapshot_rebuilds_the_namespace() -> None:
    original = busy_namespace([])

    restored = Namespace("ns")
    for record in persistence.snapshot(original):
        persistence.apply_record(restored, *as_logged(record))

    assert picture(restored) == picture(original)
    assert picture(restored)["q1"] == 6  # 6 sent + 1 scheduled - 1 completed (dead-lettered counts)


def test_journal_replay_rebuilds_the_namespace() -> None:
    journal: list[Record] = []
    original = busy_namespace(journal)

    restored = Namespace("ns")
    for record in journal:
        persistence.apply_record(restored, *record)

    assert picture(restored) == picture(original)


def test_replayed_duplicate_window_still_drops_duplicates() -> None:
    original = busy_namespace([])
    restored = Namespace("ns")
    for record in persistence.snapshot(original):
        persistence.apply_record(restored, *as_logged(record))

    assert restored.send("q1", [IncomingMessage(raw=b"dup", message_id="m1")], T0 + 2) == [0]


def test_a_subscription_created_with_a_default_rule_has_that_rule_only() -> None:
    ns = Namespace("ns")
    ns.create(TopicDescription(name="t1"), T0)
    first = RuleDescription("", "", "only-b", CorrelationRuleFilter(correlation_id="b"))

    ns.create(SubscriptionDescription(topic_name="t1", name="s"), T0, first)
    ns.send(
        "t1",
        [
            IncomingMessage(raw=b"a", properties={"sys.CorrelationId": "a"}),
            IncomingMessage(raw=b"b", properties={"sys.CorrelationId": "b"}),
        ],
        T0,
    )

    [rule] = ns.list(EntityKind.RULE, "t1/Subscriptions/s")
    assert (rule.name, rule.topic_name, rule.subscription_name) == ("only-b", "t1", "s")
    assert [m.raw for m in ns.store("t1/Subscriptions/s").messages.values()] == [b"b"]
    with pytest.raises(ArgumentError):
        ns.create(QueueDescription(name="q"), T0, first)
