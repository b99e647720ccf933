"""Just enough of the AMQP 1.0 frame encoding to read and rewrite a few performative fields.

The wire filter (``sequencing``) sits between the socket and proton: it must find frame boundaries, tell a
``begin``, ``transfer``, ``disposition`` or ``close`` apart, and read or replace a leading unsigned-int field
of one — nothing more. Everything else is passed through byte for byte, so this is not a codec: fields it
does not understand end the parse (``None``) and the frame goes to proton unchanged.

Encodings (AMQP 1.0 part 1, section 1.6): a performative is ``0x00`` + a ``smallulong``/``ulong`` descriptor
+ a list (``list0`` 0x45, ``list8`` 0xc0, ``list32`` 0xd0) whose fields are ``uint`` (0x43 zero, 0x52 one
byte, 0x70 four bytes), ``ushort`` (0x60), ``null`` (0x40), ``boolean`` (0x41 true, 0x42 false, 0x56 byte)
or ``binary`` (0xa0, 0xb0).
"""

from __future__ import annotations

from dataclasses import dataclass

from proton import Condition, Data

HEADER = 8  # size (4), data offset (1), type (1), channel (2)
PROTOCOL_HEADER = b"AMQP"
AMQP_FRAME = 0

BEGIN = 0x11
TRANSFER = 0x14
DISPOSITION = 0x15
END = 0x17
CLOSE = 0x18
ERROR = 0x1D


@dataclass(frozen=True, slots=True)
class Performative:
    """Where a frame's performative list lives, and where its fields start."""

    code: int
    list_at: int  # offset of the list constructor within the frame
    fields_at: int  # offset of the first field
    count: int  # number of fields the list holds
    wide: bool  # list32 (four-byte size and count) rather than list8


def frame_size(buffer: bytes | bytearray | memoryview, at: int) -> int:
    """The size of the frame starting at ``at`` (8 for a protocol header)."""
    if buffer[at : at + 4] == PROTOCOL_HEADER:
        return HEADER
    return int.from_bytes(buffer[at : at + 4], "big")


def channel_of(frame: bytes | bytearray) -> int:
    """The frame's channel."""
    return int.from_bytes(frame[6:8], "big")


def performative(frame: bytes | bytearray) -> Performative | None:
    """The performative of an AMQP frame, or ``None`` for SASL frames, heartbeats and what we cannot read."""
    if len(frame) <= HEADER or frame[5] != AMQP_FRAME or frame[:4] == PROTOCOL_HEADER:
        return None
    at = frame[4] * 4
    if at + 3 > len(frame) or frame[at] != 0x00:
        return None
    if frame[at + 1] == 0x53:
        code, at = frame[at + 2], at + 3
    elif frame[at + 1] == 0x80 and at + 10 <= len(frame):
        code, at = int.from_bytes(frame[at + 2 : at + 10], "big"), at + 10
    else:
        return None
    if at >= len(frame):
        return None
    constructor = frame[at]
    if constructor == 0x45:
        return Performative(code, at, at + 1, 0, False)
    if constructor == 0xC0 and at + 3 <= len(frame):
        return Performative(code, at, at + 3, frame[at + 2], False)
    if constructor == 0xD0 and at + 9 <= len(frame):
        return Performative(code, at, at + 9, int.from_bytes(frame[at + 5 : at + 9], "big"), True)
    return None


def skip_field(frame: bytes | bytearray, at: int) -> int | None:
    """The offset after the field at ``at``, for the fixed-width and binary types above; else ``None``."""
    if at >= len(frame):
        return None
    code = frame[at]
    width = _FIXED.get(code)
    if width is not None:
        return at + 1 + width
    if code == 0xA0 and at + 2 <= len(frame):
        return at + 2 + frame[at + 1]
    if code == 0xB0 and at + 5 <= len(frame):
        return at + 5 + int.from_bytes(frame[at + 1 : at + 5], "big")
    return None


_FIXED = {0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x52: 1, 0x56: 1, 0x60: 2, 0x70: 4, 0x44: 0, 0x53: 1, 0x80: 8}


def read_uint(frame: bytes | bytearray, at: int) -> int | None:
    """The ``uint``/``ushort`` at ``at``, or ``None`` for null or another type."""
    code = frame[at] if at < len(frame) else 0x40
    if code == 0x43:
        return 0
    if code == 0x52:
        return frame[at + 1]
    if code == 0x60:
        return int.from_bytes(frame[at + 1 : at + 3], "big")
    if code == 0x70:
        return int.from_bytes(frame[at + 1 : at + 5], "big")
    return None


def read_bool(frame: bytes | bytearray, at: int) -> bool | None:
    """The ``boolean`` at ``at``, or ``None`` for null."""
    code = frame[at] if at < len(frame) else 0x40
    if code == 0x41:
        return True
    if code == 0x42:
        return False
    if code == 0x56:
        return bool(frame[at + 1])
    return None


def field_offsets(frame: bytes | bytearray, perf: Performative, count: int) -> list[int] | None:
    """Offsets of the first ``count`` fields (fewer if the list is shorter); ``None`` if one is unreadable."""
    offsets: list[int] = []
    at: int | None = perf.fields_at
    for _ in range(min(count, perf.count)):
        if at is None:
            return None
        offsets.append(at)
        at = skip_field(frame, at)
    return offsets


def replace_uint(frame: bytes | bytearray, perf: Performative, at: int, value: int) -> bytes:
    """The frame with the ``uint`` field at ``at`` replaced by ``value`` (sizes adjusted)."""
    end = skip_field(frame, at)
    assert end is not None
    encoded = b"\x70" + value.to_bytes(4, "big")
    body = bytes(frame[perf.fields_at : at]) + encoded + bytes(frame[end:])
    old_list_size = (
        int.from_bytes(frame[perf.list_at + 1 : perf.list_at + 5], "big")
        if perf.wide
        else frame[perf.list_at + 1]
    )
    delta = len(encoded) - (end - at)
    new_size = old_list_size + delta
    if perf.wide:
        head = b"\xd0" + new_size.to_bytes(4, "big") + perf.count.to_bytes(4, "big")
    elif new_size <= 255:
        head = bytes((0xC0, new_size, perf.count))
    else:
        # list8 → list32: the size field then counts a four-byte count instead of one byte.
        head = b"\xd0" + (new_size + 3).to_bytes(4, "big") + perf.count.to_bytes(4, "big")
    out = bytes(frame[HEADER : perf.list_at]) + head + body
    return (HEADER + len(out)).to_bytes(4, "big") + bytes(frame[4:HEADER]) + out


def close_frame(condition: Condition) -> bytes:
    """A ``close`` frame (channel 0) carrying ``condition`` with its name, description and info map."""
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(CLOSE)
    data.put_list()
    data.enter()
    data.put_described()
    data.enter()
    data.put_ulong(ERROR)
    data.put_list()
    data.enter()
    data.put_symbol(condition.name)
    data.put_string(condition.description or "")
    data.put_object(condition.info or {})
    data.exit()
    data.exit()
    data.exit()
    data.exit()
    body = data.encode()
    return (HEADER + len(body)).to_bytes(4, "big") + b"\x02\x00\x00\x00" + body
