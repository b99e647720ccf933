"""The messages of one queue or subscription, with its dead-letter sub-queue and sessions.

Pure state: every method takes ``now`` and returns what happened; nothing here reads a clock, sleeps or
does I/O. Mutations that must survive a restart are reported to ``journal`` (the write-ahead log), which
the namespace wires up. Ready messages sit in heaps ordered by sequence number, so an abandoned message
goes back to its place in line; heap entries are validated when popped (lazy deletion), which keeps every
operation O(log n).
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from bridge.emulator.errors import MessageLockLostError, MessageNotFoundError, SessionCannotBeLockedError
from bridge.emulator.model.messages import Delivery, MessageState, StoredMessage
from bridge.emulator.model.sessions import SessionTable

Journal = Callable[[str, dict[str, Any], list[bytes]], None]
TokenFactory = Callable[[], uuid.UUID]

MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"
EXPIRED_REASON = "TTLExpiredException"


@dataclass(slots=True)
class StoreOptions:
    """The entity options that change how messages behave (from the entity's description)."""

    lock_duration: float = 60.0
    max_delivery_count: int = 10
    default_ttl: float | None = None
    dead_letter_on_expiration: bool = False
    requires_session: bool = False


class MessageStore:
    """A queue's or subscription's messages; ``dlq`` is its ``$deadletterqueue`` (None for a DLQ)."""

    def __init__(
        self,
        path: str,
        options: StoreOptions,
        token_factory: TokenFactory = uuid.uuid4,
        is_dead_letter: bool = False,
    ) -> None:
        self.path = path
        self.options = options
        self.token_factory = token_factory
        self.journal: Journal | None = None
        self.messages: dict[int, StoredMessage] = {}
        self.size_bytes = 0
        self._ready: list[int] = []
        self._session_ready: dict[str, list[int]] = {}
        self._scheduled: list[tuple[float, int]] = []
        self._expiry: list[tuple[float, int]] = []
        self._lock_expiry: list[tuple[float, int]] = []
        self._locks: dict[uuid.UUID, int] = {}
        self.sessions = SessionTable()
        self.dlq: MessageStore | None = None
        if not is_dead_letter:
            self.dlq = MessageStore(
                path + "/$deadletterqueue",
                StoreOptions(
                    lock_duration=options.lock_duration,
                    max_delivery_count=2**62,
                ),
                token_factory,
                is_dead_letter=True,
            )
        self.is_dead_letter = is_dead_letter

    # ---- journal -------------------------------------------------------------------------------
    def _log(self, kind: str, fields: dict[str, Any], blobs: list[bytes] | None = None) -> None:
        if self.journal is not None:
            fields["p"] = self.path
            self.journal(kind, fields, blobs or [])

    def set_journal(self, journal: Journal | None) -> None:
        """Attach (or detach, during replay) the write-ahead log."""
        self.journal = journal
        if self.dlq is not None:
            self.dlq.journal = journal

    # ---- insertion -----------------------------------------------------------------------------
    def insert(self, msg: StoredMessage, now: float) -> None:
        """Add a message (not journaled: the namespace journals the send that caused it)."""
        if self.options.default_ttl is not None and (
            msg.time_to_live is None or msg.time_to_live > self.options.default_ttl
        ):
            msg.time_to_live = self.options.default_ttl
        visible_at = msg.scheduled_at if msg.scheduled_at is not None else msg.enqueued_at
        if msg.time_to_live is not None and msg.expires_at is None and not self.is_dead_letter:
            msg.expires_at = visible_at + msg.time_to_live
        if msg.state is MessageState.ACTIVE and msg.scheduled_at is not None and msg.scheduled_at > now:
            msg.state = MessageState.SCHEDULED
        self.place(msg)

    def place(self, msg: StoredMessage) -> None:
        """Index a message by its current state (scheduled, ready or deferred); not journaled.

        Public for replay: a snapshot's ``msg`` record restores a message exactly as it was.
        """
        self.messages[msg.seq] = msg
        self.size_bytes += msg.size
        if msg.state is MessageState.SCHEDULED:
            heapq.heappush(self._scheduled, (msg.scheduled_at or 0.0, msg.seq))
        elif msg.state is MessageState.ACTIVE:
            self._make_ready(msg)
        if msg.expires_at is not None and not self.is_dead_letter:
            heapq.heappush(self._expiry, (msg.expires_at, msg.seq))

    def _make_ready(self, msg: StoredMessage) -> None:
        if self.options.requires_session and msg.session_id is not None:
            heapq.heappush(self._session_ready.setdefault(msg.session_id, []), msg.seq)
        else:
            heapq.heappush(self._ready, msg.seq)

    def remove(self, seq: int) -> StoredMessage:
        """Drop a message and its lock; not journaled (callers log why it went, replay calls it bare)."""
        msg = self.messages.pop(seq)
        self.size_bytes -= msg.size
        if msg.lock_token is not None:
            self._locks.pop(msg.lock_token, None)
            msg.lock_token = None
        return msg

    # ---- receiving -----------------------------------------------------------------------------
    def take(self, count: int, now: float, peek_lock: bool, session_id: str | None = None) -> list[Delivery]:
        """Up to ``count`` ready messages in sequence order, locked (PEEK_LOCK) or removed."""
        heap = self._session_ready.get(session_id, []) if session_id is not None else self._ready
        out: list[Delivery] = []
        while heap and len(out) < count:
            seq = heapq.heappop(heap)
            msg = self.messages.get(seq)
            if msg is None or msg.state is not MessageState.ACTIVE or msg.lock_token is not None:
                continue
            if msg.expires_at is not None and msg.expires_at <= now:
                self._expire(msg)
                continue
            out.append(self._deliver(msg, now, peek_lock))
        return out

    def _deliver(self, msg: StoredMessage, now: float, peek_lock: bool) -> Delivery:
        if not peek_lock:
            self.remove(msg.seq)
            self._log("rm", {"s": msg.seq})
            return Delivery(msg, None, None, msg.delivery_count)
        token = self.token_factory()
        msg.lock_token = token
        msg.locked_until = now + self.options.lock_duration
        self._locks[token] = msg.seq
        heapq.heappush(self._lock_expiry, (msg.locked_until, msg.seq))
        return Delivery(msg, token, msg.locked_until, msg.delivery_count)

    # ---- settlement ----------------------------------------------------------------------------
    def _locked(self, token: uuid.UUID, now: float) -> StoredMessage:
        seq = self._locks.get(token)
        msg = self.messages.get(seq) if seq is not None else None
        if msg is None or msg.lock_token != token:
            raise MessageLockLostError("The lock supplied is invalid: it expired or the message is gone.")
        if msg.locked_until is not None and msg.locked_until < now and not self._held_by_session(msg, now):
            self._unlock(msg)
            self._count_failed_delivery(msg, now)
            raise MessageLockLostError("The lock supplied expired before the settlement.")
        return msg

    def _held_by_session(self, msg: StoredMessage, now: float) -> bool:
        """A session message's lock is the session's, as on Azure: while the session lock lives the
        message stays locked (its lock follows the session's; ``release_session`` ends both)."""
        until = self.sessions.live_until(msg.session_id, now)
        if until is None:
            return False
        msg.locked_until = until
        heapq.heappush(self._lock_expiry, (until, msg.seq))
        return True

    def _unlock(self, msg: StoredMessage) -> None:
        if msg.lock_token is not None:
            self._locks.pop(msg.lock_token, None)
        msg.lock_token = None
        msg.locked_until = None

    def complete(self, token: uuid.UUID, now: float) -> StoredMessage:
        """Remove a locked message."""
        msg = self._locked(token, now)
        self.remove(msg.seq)
        self._log("rm", {"s": msg.seq})
        return msg

    def rewrite(self, token: uuid.UUID, now: float, change: Callable[[bytes], bytes]) -> None:
        """Apply ``change`` to a locked message's encoded bytes (properties modified as it is settled)."""
        msg = self._locked(token, now)
        self.replace_raw(msg, change(msg.raw))

    def replace_raw(self, msg: StoredMessage, raw: bytes, journal: bool = True) -> None:
        """Give a message new encoded bytes; journaled with them unless replaying."""
        self.size_bytes += len(raw) - msg.size
        msg.raw = raw
        if journal:
            self._log("raw", {"s": msg.seq}, [raw])

    def abandon(self, token: uuid.UUID, now: float) -> None:
        """Release the lock; the delivery counts as failed (MaxDeliveryCount may dead-letter it)."""
        msg = self._locked(token, now)
        self._unlock(msg)
        self._count_failed_delivery(msg, now)

    def release(self, token: uuid.UUID, now: float) -> None:
        """Unlock without counting a delivery (the client gave back a message it never looked at)."""
        msg = self._locked(token, now)
        self._unlock(msg)
        if msg.state is MessageState.ACTIVE:
            self._make_ready(msg)

    def defer(self, token: uuid.UUID, now: float) -> None:
        """Set the message aside; only receive-by-sequence-number reaches it again."""
        msg = self._locked(token, now)
        self._unlock(msg)
        msg.state = MessageState.DEFERRED
        self._log("st", {"s": msg.seq, "st": msg.state.value})

    def dead_letter(self, token: uuid.UUID, now: float, reason: str | None, description: str | None) -> None:
        """Move a locked message to the dead-letter sub-queue with the reason."""
        msg = self._locked(token, now)
        self._unlock(msg)
        self.move_to_dead_letter(msg, reason, description)

    def renew(self, token: uuid.UUID, now: float) -> float:
        """Extend a message lock by the lock duration; returns the new locked-until time."""
        msg = self._locked(token, now)
        msg.locked_until = now + self.options.lock_duration
        heapq.heappush(self._lock_expiry, (msg.locked_until, msg.seq))
        return msg.locked_until

    def _count_failed_delivery(self, msg: StoredMessage, now: float) -> None:
        msg.delivery_count += 1
        if msg.delivery_count >= self.options.max_delivery_count:
            self.move_to_dead_letter(
                msg,
                MAX_DELIVERY_REASON,
                f"Message could not be consumed after {self.options.max_delivery_count} delivery attempts.",
            )
            return
        self._log("dc", {"s": msg.seq, "dc": msg.delivery_count})
        if msg.state is MessageState.ACTIVE:
            self._make_ready(msg)

    def move_to_dead_letter(
        self, msg: StoredMessage, reason: str | None, description: str | None, journal: bool = True
    ) -> None:
        """Move a message (by object) to the DLQ; a DLQ's own messages stay where they are."""
        if self.dlq is None:
            if msg.state is MessageState.ACTIVE:
                self._make_ready(msg)
            return
        self.remove(msg.seq)
        msg.state = MessageState.ACTIVE
        msg.dead_letter_reason = reason
        msg.dead_letter_description = description
        msg.dead_letter_source = None
        msg.expires_at = None
        self.dlq.place(msg)
        if journal:
            self._log("dl", {"s": msg.seq, "r": reason, "d": description})

    def _expire(self, msg: StoredMessage) -> None:
        if self.options.dead_letter_on_expiration:
            self.move_to_dead_letter(msg, EXPIRED_REASON, "The message expired and was dead lettered.")
        else:
            self.remove(msg.seq)
            self._log("rm", {"s": msg.seq})

    # ---- deferred, scheduled, peek ---------------------------------------------------------------
    def receive_deferred(self, seqs: Iterable[int], now: float, peek_lock: bool) -> list[Delivery]:
        """Deferred messages by sequence number; every number must name a deferred message."""
        wanted = list(seqs)
        msgs = [self.messages.get(seq) for seq in wanted]
        for seq, msg in zip(wanted, msgs, strict=True):
            if msg is None or msg.state is not MessageState.DEFERRED or msg.lock_token is not None:
                raise MessageNotFoundError(f"Failed to retrieve deferred message {seq}: not found.")
        return [self._deliver(msg, now, peek_lock) for msg in msgs if msg is not None]

    def cancel_scheduled(self, seqs: Iterable[int]) -> None:
        """Remove scheduled messages; unknown numbers are ignored, as on Azure."""
        for seq in seqs:
            msg = self.messages.get(seq)
            if msg is not None and msg.state is MessageState.SCHEDULED:
                self.remove(seq)
                self._log("rm", {"s": seq})

    def delete_batch(self, count: int, before: float, session_id: str | None = None) -> int:
        """Delete up to ``count`` messages enqueued before ``before``, oldest first; returns how many.

        Active and deferred messages qualify; locked ones stay, as on Azure (scheduled ones are not
        enqueued yet). A session id limits the deletion to that session's messages.
        """
        deleted = 0
        for seq in sorted(self.messages):
            if deleted >= count:
                break
            msg = self.messages[seq]
            if msg.lock_token is not None or msg.state not in (MessageState.ACTIVE, MessageState.DEFERRED):
                continue
            if msg.visible_since >= before or (session_id is not None and msg.session_id != session_id):
                continue
            self.remove(seq)
            self._log("rm", {"s": seq})
            deleted += 1
        return deleted

    def peek(self, from_seq: int, count: int, session_id: str | None = None) -> list[StoredMessage]:
        """Messages from ``from_seq`` on, in order, without locking (locked, deferred, scheduled too)."""
        out: list[StoredMessage] = []
        for seq in sorted(s for s in self.messages if s >= from_seq):
            msg = self.messages[seq]
            if session_id is not None and msg.session_id != session_id:
                continue
            out.append(msg)
            if len(out) >= count:
                break
        return out

    # ---- time ------------------------------------------------------------------------------------
    def tick(self, now: float) -> bool:
        """Apply lock expiry, scheduled activation and TTL expiry up to ``now``.

        True if messages became ready, so the caller knows which stores to pump.
        """
        woke = False
        while self._lock_expiry and self._lock_expiry[0][0] <= now:
            _, seq = heapq.heappop(self._lock_expiry)
            msg = self.messages.get(seq)
            if msg is None or msg.lock_token is None or msg.locked_until is None or msg.locked_until > now:
                continue
            if self._held_by_session(msg, now):
                continue
            self._unlock(msg)
            self._count_failed_delivery(msg, now)
            woke = True
        while self._scheduled and self._scheduled[0][0] <= now:
            _, seq = heapq.heappop(self._scheduled)
            msg = self.messages.get(seq)
            if msg is None or msg.state is not MessageState.SCHEDULED:
                continue
            msg.state = MessageState.ACTIVE
            self._make_ready(msg)
            woke = True
        while self._expiry and self._expiry[0][0] <= now:
            _, seq = heapq.heappop(self._expiry)
            msg = self.messages.get(seq)
            if msg is None or msg.lock_token is not None or msg.expires_at is None or msg.expires_at > now:
                continue
            if msg.state is MessageState.ACTIVE:
                self._expire(msg)
                woke = woke or self.options.dead_letter_on_expiration
        if self.dlq is not None:
            woke = self.dlq.tick(now) or woke
        return woke

    def next_deadline(self) -> float | None:
        """The earliest time at which ``tick`` has something to do."""
        heads = [h[0][0] for h in (self._lock_expiry, self._scheduled, self._expiry) if h]
        if self.dlq is not None:
            sub = self.dlq.next_deadline()
            if sub is not None:
                heads.append(sub)
        return min(heads) if heads else None

    # ---- sessions --------------------------------------------------------------------------------
    def lock_session(self, session_id: str | None, owner: str, now: float) -> tuple[str, float]:
        """Lock a named session, or the next session with ready messages (``session_id`` None)."""
        if session_id is None:
            session_id = self._next_available_session(now)
            if session_id is None:
                raise SessionCannotBeLockedError("No unlocked session with messages is available.")
        until = self.sessions.acquire(session_id, owner, now, self.options.lock_duration)
        return session_id, until

    def _next_available_session(self, now: float) -> str | None:
        # The unlocked session whose oldest ready message is oldest overall, so sessions are served in
        # the order their messages arrived; stale heap heads are dropped on the way (lazy deletion).
        best: tuple[int, str] | None = None
        for sid, heap in self._session_ready.items():
            if self.sessions.is_locked(sid, now):
                continue
            while heap:
                msg = self.messages.get(heap[0])
                if msg is not None and msg.state is MessageState.ACTIVE and msg.lock_token is None:
                    break
                heapq.heappop(heap)
            if heap and (best is None or heap[0] < best[0]):
                best = (heap[0], sid)
        return best[1] if best else None

    def renew_session(self, session_id: str, owner: str, now: float) -> float:
        """Extend the owner's session lock by the lock duration; SessionLockLost if it is gone."""
        return self.sessions.renew(session_id, owner, now, self.options.lock_duration)

    def release_session(self, session_id: str, owner: str, now: float) -> bool:
        """Drop the owner's session lock (its link closed); True if messages it held became ready.

        As on Azure, a session's message locks go with the session lock: its unsettled messages are
        delivered again (delivery count + 1) to the next holder, ahead of later ones, so FIFO holds.
        """
        if not self.sessions.release(session_id, owner):
            return False
        locked = [
            m for m in self.messages.values() if m.session_id == session_id and m.lock_token is not None
        ]
        for msg in locked:
            self._unlock(msg)
            self._count_failed_delivery(msg, now)
        return bool(locked)

    def set_session_state(self, session_id: str, state: bytes | None) -> None:
        """Store (or clear, with None) a session's state blob, journaled so it survives a restart."""
        self.sessions.set_state(session_id, state)
        self._log("ss", {"sid": session_id}, [state] if state is not None else [])

    # ---- counts ----------------------------------------------------------------------------------
    def counts(self) -> tuple[int, int, int]:
        """(active incl. locked and deferred, scheduled, dead-lettered)."""
        scheduled = sum(1 for m in self.messages.values() if m.state is MessageState.SCHEDULED)
        dead = len(self.dlq.messages) if self.dlq is not None else 0
        return len(self.messages) - scheduled, scheduled, dead
