"""Gather the journal files of every folder a roll wrote into (``bridge.journal.folders``) into one.

A rolled file is never changed once in place and its name is unique to its events, so gathering is a copy
of the files the report's folder lacks (to a hidden name, then renamed: a file is there whole or not at
all), and gathering again copies nothing twice. A file copied that repeats events of another is harmless:
the ledger keeps one row per ``event_id``. A recorded folder whose path here does not hold the same folder
id is another host's local folder: its events cannot be read from here, and the report says so.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bridge.journal.folders import Folder, existing_id, folder_id


@dataclass
class Gathered:
    """What gathering did: files copied, and the folders that could not be read from this host."""

    copied: int = 0
    unreadable: list[str] = field(default_factory=list)


def gather(folders: list[Folder], into: Path) -> Gathered:
    """Copy the ``*.parquet`` files of ``folders`` that ``into`` lacks, keeping their partition paths."""
    result = Gathered()
    own = folder_id(into)
    for folder in folders:
        if folder.folder_id == own:
            continue
        if existing_id(folder.path) != folder.folder_id:
            result.unreadable.append(f"{folder.host}:{folder.path}")
            continue
        result.copied += _copy_missing(folder.path, into)
    return result


def _copy_missing(source: Path, into: Path) -> int:
    copied = 0
    for path in sorted(source.rglob("*.parquet")):
        relative = path.relative_to(source)
        if any(part.startswith((".", "_")) for part in relative.parts):
            continue  # a roller's temporary file, or Spark's bookkeeping
        target = into / relative
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.gathering")
        shutil.copyfile(path, temporary)
        with temporary.open("rb") as handle:
            os.fsync(handle.fileno())
        temporary.rename(target)
        copied += 1
    return copied
