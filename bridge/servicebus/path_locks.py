"""``PathLocks``: one lock per handler path (``send:<entity>``, ``receive:<queue>``) that exists only while
some thread holds or waits for it.

Each SDK sender or receiver is used by one call at a time, so every call takes its path's lock. A plain
dict of locks kept one entry per path ever used, for the life of the client: a worker that once sent to
thousands of entity names held thousands of locks. Here an entry counts the threads that hold or wait for
it and is dropped when the last one lets go; a path nobody uses costs nothing. Removal and creation happen
under one small guard, so two threads asking for the same path always get the same lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class PathLocks:
    """Locks by path, freed when unused (see the module docstring)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def acquire(self, path: str, timeout: float = -1.0) -> bool:
        """Take ``path``'s lock, waiting at most ``timeout`` seconds (-1: for ever; 0: not at all)."""
        with self._guard:
            entry = self._entries.get(path)
            if entry is None:
                entry = self._entries[path] = _Entry()
            entry.users += 1
        taken = entry.lock.acquire(timeout != 0, timeout if timeout > 0 else -1)
        if not taken:
            self._leave(path, entry)
        return taken

    def release(self, path: str) -> None:
        """Give back ``path``'s lock, taken with ``acquire``."""
        with self._guard:
            entry = self._entries[path]
        entry.lock.release()
        self._leave(path, entry)

    def _leave(self, path: str, entry: _Entry) -> None:
        with self._guard:
            entry.users -= 1
            if entry.users == 0 and self._entries.get(path) is entry:
                del self._entries[path]

    @contextmanager
    def held(self, path: str) -> Iterator[None]:
        """``path``'s lock for the block, waited for as long as it takes."""
        self.acquire(path)
        try:
            yield
        finally:
            self.release(path)

    def busy(self, path: str) -> bool:
        """Whether some thread holds or waits for ``path``'s lock now."""
        with self._guard:
            return path in self._entries

    def __len__(self) -> int:
        """Paths held or waited for now."""
        with self._guard:
            return len(self._entries)
