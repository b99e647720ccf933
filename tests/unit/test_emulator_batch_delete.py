"""Batch delete on a message store (``com.microsoft:batch-delete-messages``): which messages qualify."""

from __future__ import annotations

from bridge.emulator.model.messages import MessageState, StoredMessage
from bridge.emulator.model.store import MessageStore, StoreOptions

T0 = 1_700_000_000.0


def store_with(count: int, *, sessions: bool = False) -> MessageStore:
    """``count`` messages enqueued a second apart from ``T0``, in sessions "a"/"b" alternately if asked."""
    store = MessageStore("q1", StoreOptions(requires_session=sessions))
    for seq in range(1, count + 1):
        session = ("a" if seq % 2 else "b") if sessions else None
        store.insert(StoredMessage(seq=seq, raw=b"m", enqueued_at=T0 + seq, session_id=session), T0 + seq)
    return store


def test_the_oldest_unlocked_messages_go_up_to_the_count() -> None:
    store = store_with(5)
    (locked,) = store.take(1, T0 + 10, peek_lock=True)
    assert store.delete_batch(2, T0 + 10) == 2
    assert sorted(store.messages) == [locked.message.seq, 4, 5]


def test_deferred_messages_qualify_scheduled_and_newer_ones_do_not() -> None:
    store = store_with(3)
    (deferred,) = store.take(1, T0 + 10, peek_lock=True)
    assert deferred.lock_token is not None
    store.defer(deferred.lock_token, T0 + 10)
    store.insert(StoredMessage(seq=9, raw=b"m", enqueued_at=T0, scheduled_at=T0 + 3600), T0)
    assert store.messages[9].state is MessageState.SCHEDULED
    assert store.delete_batch(100, T0 + 2.5) == 2  # the deferred 1 and 2; 3 is newer than the cut-off
    assert sorted(store.messages) == [3, 9]


def test_a_session_id_limits_the_deletion_to_that_session() -> None:
    store = store_with(6, sessions=True)
    assert store.delete_batch(100, T0 + 100, "b") == 3
    assert sorted(store.messages) == [1, 3, 5]
