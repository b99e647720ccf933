"""Session locks and session state of one queue or subscription.

A session-enabled entity hands each session to one receiver at a time: the lock has an owner (a receiver
link) and an expiry, renewed through ``$management``. This table only knows who holds what until when;
the store decides which session has ready messages and what happens to a session's message locks when
its lock goes. Pure state: ``now`` is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.emulator.errors import SessionCannotBeLockedError, SessionLockLostError


@dataclass(slots=True)
class SessionLock:
    """Who holds a session and until when."""

    owner: str
    locked_until: float


class SessionTable:
    """Session locks (by session id) and the state blobs clients store with ``set_session_state``."""

    def __init__(self) -> None:
        self.locks: dict[str, SessionLock] = {}
        self.state: dict[str, bytes] = {}

    def is_locked(self, session_id: str, now: float) -> bool:
        """True if someone holds a live lock on the session (next-available skips it)."""
        held = self.locks.get(session_id)
        return held is not None and held.locked_until > now

    def live_until(self, session_id: str | None, now: float) -> float | None:
        """When the live lock on the session ends, or None (no session, or its lock is gone)."""
        held = self.locks.get(session_id) if session_id is not None else None
        return held.locked_until if held is not None and held.locked_until > now else None

    def acquire(self, session_id: str, owner: str, now: float, duration: float) -> float:
        """Lock the session for ``owner`` (re-locking its own is a renewal); returns the locked-until time."""
        held = self.locks.get(session_id)
        if held is not None and held.owner != owner and held.locked_until > now:
            raise SessionCannotBeLockedError(
                f"The requested session '{session_id}' cannot be accepted. "
                "It may be locked by another receiver."
            )
        until = now + duration
        self.locks[session_id] = SessionLock(owner, until)
        return until

    def check(self, session_id: str, owner: str, now: float) -> SessionLock:
        """The owner's live session lock, or SessionLockLost."""
        held = self.locks.get(session_id)
        if held is None or held.owner != owner or held.locked_until < now:
            raise SessionLockLostError(f"The session lock for '{session_id}' was lost.")
        return held

    def renew(self, session_id: str, owner: str, now: float, duration: float) -> float:
        """Extend the owner's session lock; returns the new locked-until time."""
        held = self.check(session_id, owner, now)
        held.locked_until = now + duration
        return held.locked_until

    def release(self, session_id: str, owner: str) -> bool:
        """Drop the session lock if ``owner`` holds it; True if it did (a stale owner changes nothing)."""
        held = self.locks.get(session_id)
        if held is None or held.owner != owner:
            return False
        del self.locks[session_id]
        return True

    def set_state(self, session_id: str, state: bytes | None) -> None:
        """Store (or clear, with None) a session's state blob."""
        if state is None:
            self.state.pop(session_id, None)
        else:
            self.state[session_id] = state
