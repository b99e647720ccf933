"""Write-ahead log of a local namespace (``--data-dir``), so messages survive even ``kill -9``.

Records are buffered while the server processes a batch of incoming frames and written + fsync'd in one
go (group commit) *before* the server writes any acknowledgement to the network; an acknowledged send is
therefore on disk. Layout of a record::

    u32 length | u32 crc32(payload) | payload
    payload = u32 header_length | JSON {"k": kind, "f": fields, "n": blob_count} | (u32 length | bytes)*

A crash can leave a torn last record; replay stops at the first record whose length or CRC does not check
out and truncates the file there. At start the log is replayed and rewritten as a compact snapshot.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Record = tuple[str, dict[str, Any], list[bytes]]
_HEAD = struct.Struct(">II")
_LEN = struct.Struct(">I")


def encode_record(kind: str, fields: dict[str, Any], blobs: list[bytes]) -> bytes:
    """One framed record."""
    header = json.dumps({"k": kind, "f": fields, "n": len(blobs)}, separators=(",", ":")).encode()
    parts = [_LEN.pack(len(header)), header]
    for blob in blobs:
        parts.append(_LEN.pack(len(blob)))
        parts.append(blob)
    payload = b"".join(parts)
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def _decode_payload(payload: bytes) -> Record:
    (hlen,) = _LEN.unpack_from(payload, 0)
    header = json.loads(payload[4 : 4 + hlen])
    pos = 4 + hlen
    blobs: list[bytes] = []
    for _ in range(header["n"]):
        (blen,) = _LEN.unpack_from(payload, pos)
        blobs.append(payload[pos + 4 : pos + 4 + blen])
        pos += 4 + blen
    return header["k"], header["f"], blobs


class WriteAheadLog:
    """Append-only record file with group commit."""

    def __init__(self, path: Path, fsync: bool = True) -> None:
        self.path = path
        self.fsync = fsync
        self._buffer: list[bytes] = []
        self._file: Any = None
        self.bytes_written = 0

    def replay(self) -> Iterator[Record]:
        """Every intact record in order; a torn tail is cut off."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        pos = 0
        while pos + _HEAD.size <= len(data):
            length, crc = _HEAD.unpack_from(data, pos)
            payload = data[pos + _HEAD.size : pos + _HEAD.size + length]
            if len(payload) < length or zlib.crc32(payload) != crc:
                break
            yield _decode_payload(payload)
            pos += _HEAD.size + length
        if pos < len(data):
            log.warning("write-ahead log %s: discarding %d bytes of a torn tail", self.path, len(data) - pos)
            with self.path.open("r+b") as fh:
                fh.truncate(pos)

    def rewrite(self, records: Iterable[Record]) -> None:
        """Replace the log with ``records`` atomically (write, fsync, rename, fsync the directory)."""
        self.close()
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            for kind, fields, blobs in records:
                fh.write(encode_record(kind, fields, blobs))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        self._fsync_dir()
        self.bytes_written = self.path.stat().st_size

    def _fsync_dir(self) -> None:
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def append(self, kind: str, fields: dict[str, Any], blobs: list[bytes]) -> None:
        """Buffer a record; it is durable after the next ``flush``."""
        self._buffer.append(encode_record(kind, fields, blobs))

    @property
    def pending(self) -> bool:
        """True if records wait for ``flush``."""
        return bool(self._buffer)

    def flush(self) -> None:
        """Write and fsync every buffered record (one fsync for the whole group)."""
        if not self._buffer:
            return
        if self._file is None:
            self._file = self.path.open("ab")
        data = b"".join(self._buffer)
        self._buffer.clear()
        self._file.write(data)
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self.bytes_written += len(data)

    def close(self) -> None:
        """Flush and close the file."""
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None
