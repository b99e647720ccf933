"""Gathering rolled journal files from the folders of several hosts (files on disk, no Redis)."""

from __future__ import annotations

from pathlib import Path

from bridge.journal.folders import Folder, folder_id
from bridge.ledger.gather import gather


def _file(folder: Path, name: str) -> None:
    part = folder / "date=2026-05-01" / "hour=13"
    part.mkdir(parents=True, exist_ok=True)
    (part / name).write_bytes(b"parquet bytes")


def test_files_of_readable_folders_are_copied_once_and_other_hosts_local_folders_are_named(tmp_path: Path):
    # Given a folder this host can read, and one recorded by another host whose path here is another folder
    readable, report = tmp_path / "a", tmp_path / "report"
    _file(readable, "j-orders-1-2.parquet")
    _file(readable, ".j-orders-3-4.parquet.tmp")  # a roller's temporary file: never gathered
    elsewhere = tmp_path / "b"
    folder_id(elsewhere)
    folders = [
        Folder(folder_id(readable), "host-a", readable, 1.0),
        Folder("an-id-this-host-does-not-have", "host-b", elsewhere, 2.0),
        Folder(folder_id(report), "host-r", report, 3.0),
    ]
    # When the report gathers them, twice
    first = gather(folders, report)
    again = gather(folders, report)
    # Then the readable folder's file is there once, and the other host's folder is reported unreadable
    assert [p.name for p in report.rglob("*.parquet")] == ["j-orders-1-2.parquet"]
    assert (first.copied, again.copied) == (1, 0)
    assert first.unreadable == [f"host-b:{elsewhere}"]
