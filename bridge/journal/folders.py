"""Every folder a roll wrote journal files into, so one report can gather them all.

The journal lives in Redis until a roll writes it to Parquet (``bridge.journal.roll``), and the roll runs
in whichever process takes it: the beat task on any worker host, or ``bridge report``. When the hosts'
``journal.directory`` is not one shared folder, each host's files land in its own folder. So every roll
records where it wrote: the folder's id (a random name kept in the folder itself, ``.bridge-journal-id``),
the host and the path, in one Redis hash. ``bridge report`` gathers the files of every recorded folder it
can read into its own (``bridge.ledger.gather``); a folder whose path here holds another id (or nothing) is
another host's local folder, and the report says plainly that its events are missing.

Connection: any blocking client; driver errors leave as ``StateStoreUnavailableError``.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bridge.journal.keys import FOLDERS
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis

ID_FILE = ".bridge-journal-id"
"""The file that names a journal folder (hidden: the ledger reads only ``*.parquet``)."""


@dataclass(frozen=True)
class Folder:
    """A journal folder some roll wrote into."""

    folder_id: str
    host: str
    path: Path
    rolled_at: float


def folder_id(directory: Path) -> str:
    """The id of ``directory``, created (atomically, first writer wins) when it has none."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / ID_FILE
    try:
        return marker.read_text().strip()
    except FileNotFoundError:
        pass
    temporary = directory / f".{ID_FILE}.{uuid.uuid4().hex}"
    temporary.write_text(uuid.uuid4().hex)
    try:
        os.link(temporary, marker)  # fails when another roller named the folder first
    except FileExistsError:
        pass
    finally:
        temporary.unlink()
    return marker.read_text().strip()


def existing_id(directory: Path) -> str | None:
    """The id of ``directory`` as seen from this host; None when it has none (or is not there)."""
    try:
        return (directory / ID_FILE).read_text().strip()
    except OSError:
        return None


class JournalFolders:
    """The record of the folders rolls wrote into (one Redis hash)."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client

    def record(self, directory: Path, now: float | None = None) -> None:
        """This host's roll wrote into ``directory``."""
        path = directory.resolve()
        value = {"host": socket.gethostname(), "path": str(path), "rolled_at": now or time.time()}
        with driver_errors():
            self.client.hset(FOLDERS, folder_id(path), json.dumps(value))

    def all(self) -> list[Folder]:
        """Every folder recorded, oldest roll first."""
        with driver_errors():
            raw = self.client.hgetall(FOLDERS)
        folders = []
        for key, value in raw.items():
            item = json.loads(value)
            name = key.decode() if isinstance(key, bytes) else str(key)
            folders.append(Folder(name, str(item["host"]), Path(item["path"]), float(item["rolled_at"])))
        return sorted(folders, key=lambda folder: folder.rolled_at)
