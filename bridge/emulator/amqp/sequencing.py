"""Delivery-ids the way Service Bus tolerates them: a wire filter between the socket and proton.

azure-servicebus 7.15 numbers its transfers without a lock (``_pyamqp/session.py``,
``_outgoing_transfer`` reads ``next_outgoing_id``, sends, then increments it). Requests made from several
threads or coroutines at once on one link — ``AutoLockRenewer`` over many messages does exactly that —
go out with repeated or out-of-order delivery-ids (measured: ids 0, 1, 1, 2, 2, 2, 2, 2, 2, 4 for ten
renewals). Service Bus accepts them and settles by the id the client used, which settles every pending
request that carries it; proton instead closes the connection ("sequencing error"), as AMQP 1.0 allows.

So the filter renumbers a new delivery whose id is not the one proton expects on its session, and
remembers ``our id → client id`` until proton's disposition for it goes out, rewritten back to the
client's id. Nothing is rewritten (and outgoing frames are not even scanned) while the client numbers
correctly, which is always the case for one thread per link.

Outgoing scanning is switched on only while there is something to learn or rewrite: a ``begin`` we have
not answered yet (to map proton's channel to the client's), a renumbered delivery not yet settled, or
proton's own ``close`` after a protocol error. That close carries no info map, which the SDK indexes
(failing with IndexError instead of a connection error), so it is re-encoded with one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proton import Condition

from bridge.emulator.amqp import frames

UINT_MASK = 0xFFFFFFFF
PERFORMATIVE_BYTES = 512  # handle, delivery-id, a tag of up to 32 bytes, format, settled, more: well within
_WATCHED = frozenset((frames.BEGIN, frames.TRANSFER, frames.END))
Rewrite = tuple[frames.Performative, int, int]  # the transfer's performative, delivery-id offset, new id


def _watched(buf: bytes | memoryview, at: int, size: int) -> bool:
    """Whether the frame at ``at`` is a begin, transfer or end (a small-ulong descriptor; else not read)."""
    body = at + buf[at + 4] * 4
    return body + 3 <= at + size and buf[body + 1] == 0x53 and buf[body + 2] in _WATCHED


@dataclass(slots=True)
class _Session:
    """What the filter tracks for one client session (by the client's channel)."""

    expected: int  # the delivery-id proton expects for the next new delivery
    continuing: dict[int, int] = field(default_factory=dict)  # handle → our id of a multi-frame delivery


class DeliveryIdFilter:
    """Renumbers a connection's incoming transfers for proton and maps its dispositions back."""

    def __init__(self) -> None:
        self._pending = bytearray()  # the start of a frame whose head (or, to rewrite it, whole) is missing
        self._skip = 0  # bytes of the current frame still to pass on unread
        self._held: Rewrite | None = None  # the rewrite of the frame in ``_pending``, decided already
        self._sessions: dict[int, _Session] = {}
        self._unanswered_begins: set[int] = set()  # client channels whose begin proton has not answered
        self._remote_channel: dict[int, int] = {}  # proton's channel → the client's
        self._renumbered: dict[tuple[int, int], int] = {}  # (client channel, our id) → client's id
        self.broken = False  # unreadable framing: pass everything through, proton reports the error
        self.close_condition: Condition | None = None  # replaces the condition of proton's close frame

    @property
    def scans_output(self) -> bool:
        """Whether outgoing frames must be looked at (see the module docstring)."""
        return bool(self._unanswered_begins or self._renumbered or self.close_condition)

    # ---- client → proton -------------------------------------------------------------------------
    def incoming(self, data: bytes) -> list[bytes | memoryview]:
        """The pieces to give proton for ``data``, in order, transfers renumbered where needed.

        The common case copies nothing and reads only each frame's header and descriptor (the first 512
        bytes of a ``begin``, ``transfer`` or ``end``): a large frame's payload streams through as it
        arrives. Only a transfer that must be renumbered is held until it is whole, then rebuilt.
        """
        if self.broken:
            return [data]
        out: list[bytes | memoryview] = []
        view = memoryview(data)
        if self._skip:  # the rest of a frame already passed on
            n = min(self._skip, len(view))
            self._skip -= n
            out.append(view[:n])
            view = view[n:]
        if self._pending:
            view = memoryview(bytes(self._pending) + view)
            self._pending = bytearray()
        start = at = 0
        total = len(view)
        while total - at >= frames.HEADER:
            size = frames.frame_size(view, at)
            if size < frames.HEADER:
                self.broken = True  # not AMQP framing: let proton say so
                at = total
                break
            avail = total - at
            rewrite = self._held
            if rewrite is None and size > frames.HEADER and view[at + 5] == frames.AMQP_FRAME:
                head = min(size, PERFORMATIVE_BYTES)
                if avail < head:
                    break  # wait for the frame's head (small) before passing any of it on
                if _watched(view, at, head):
                    rewrite = self._inspect_incoming(bytes(view[at : at + head]))
            if rewrite is not None:
                if avail < size:
                    self._held = rewrite  # decided once; applied when the frame is whole
                    break
                self._held = None
                out.append(view[start:at])
                out.append(frames.replace_uint(bytes(view[at : at + size]), *rewrite))
                start = at + size
            elif avail < size:
                self._skip = size - avail
                at = total
                break
            at += size
        if at < total:
            self._pending = bytearray(view[at:])
        out.append(view[start:at])
        return [piece for piece in out if len(piece)]

    def _inspect_incoming(self, frame: bytes) -> Rewrite | None:
        """Track sessions; for a transfer proton would refuse, the delivery-id to write instead."""
        perf = frames.performative(frame)
        if perf is None:
            return None
        channel = frames.channel_of(frame)
        if perf.code == frames.TRANSFER:
            return self._on_transfer(frame, perf, channel)
        if perf.code == frames.BEGIN:
            offsets = frames.field_offsets(frame, perf, 2)
            if offsets is not None and len(offsets) == 2:
                first = frames.read_uint(frame, offsets[1])
                self._sessions[channel] = _Session(first or 0)
                self._unanswered_begins.add(channel)
        elif perf.code == frames.END:
            self._sessions.pop(channel, None)
            self._renumbered = {k: v for k, v in self._renumbered.items() if k[0] != channel}
        return None

    def _on_transfer(self, frame: bytes, perf: frames.Performative, channel: int) -> Rewrite | None:
        session = self._sessions.get(channel)
        offsets = frames.field_offsets(frame, perf, 6)
        if session is None or offsets is None or len(offsets) < 2:
            return None
        handle = frames.read_uint(frame, offsets[0])
        sent_id = frames.read_uint(frame, offsets[1])
        if handle is None:
            return None
        more = len(offsets) == 6 and frames.read_bool(frame, offsets[5]) is True
        ours = session.continuing.get(handle)
        if ours is None:  # a new delivery: proton wants the session's next id
            ours = session.expected
            session.expected = (session.expected + 1) & UINT_MASK
        if more:
            session.continuing[handle] = ours
        else:
            session.continuing.pop(handle, None)
        if sent_id is None or sent_id == ours:
            return None
        self._renumbered[(channel, ours)] = sent_id
        return (perf, offsets[1], ours)

    # ---- proton → client -------------------------------------------------------------------------
    def outgoing(self, data: bytes) -> bytes:
        """Proton's output with dispositions of renumbered deliveries given the client's ids back."""
        out: list[bytes] = []
        start = at = 0
        while len(data) - at >= frames.HEADER:
            size = frames.frame_size(data, at)
            if size < frames.HEADER or len(data) - at < size:
                break  # proton writes whole frames; anything else goes out untouched
            if size > frames.HEADER:
                rewritten = self._inspect_outgoing(data[at : at + size])
                if rewritten is not None:
                    out.append(data[start:at])
                    out.append(rewritten)
                    start = at + size
            at += size
        if not out:
            return data
        out.append(data[start:])
        return b"".join(out)

    def _inspect_outgoing(self, frame: bytes) -> bytes | None:
        perf = frames.performative(frame)
        if perf is None:
            return None
        if perf.code == frames.BEGIN:
            offsets = frames.field_offsets(frame, perf, 1)
            remote = frames.read_uint(frame, offsets[0]) if offsets else None
            if remote is not None:
                self._remote_channel[frames.channel_of(frame)] = remote
                self._unanswered_begins.discard(remote)
            return None
        if perf.code == frames.DISPOSITION and self._renumbered:
            return self._on_disposition(frame, perf)
        if perf.code == frames.CLOSE and self.close_condition is not None:
            return frames.close_frame(self.close_condition)
        return None

    def _on_disposition(self, frame: bytes, perf: frames.Performative) -> bytes | None:
        offsets = frames.field_offsets(frame, perf, 4)
        if offsets is None or len(offsets) < 2 or frames.read_bool(frame, offsets[0]) is not True:
            return None  # not a receiver's disposition: it names deliveries we sent
        channel = self._remote_channel.get(frames.channel_of(frame))
        first = frames.read_uint(frame, offsets[1])
        if channel is None or first is None:
            return None
        last = frames.read_uint(frame, offsets[2]) if len(offsets) > 2 else None
        ids = range(first, (last if last is not None else first) + 1)
        if not any((channel, i) in self._renumbered for i in ids):
            return None
        settled = len(offsets) > 3 and frames.read_bool(frame, offsets[3]) is True
        parts = []
        for ours in ids:
            theirs = self._renumbered.get((channel, ours), ours)
            if settled:
                self._renumbered.pop((channel, ours), None)
            one = frames.replace_uint(frame, perf, offsets[1], theirs)
            parts.append(_with_last(one, theirs))
        return b"".join(parts)


def _with_last(frame: bytes, value: int) -> bytes:
    """``frame`` (a disposition) with its ``last`` field, if any, set to ``value``: a single delivery."""
    perf = frames.performative(frame)
    assert perf is not None
    offsets = frames.field_offsets(frame, perf, 3)
    if offsets is None or len(offsets) < 3 or frames.read_uint(frame, offsets[2]) is None:
        return frame
    return frames.replace_uint(frame, perf, offsets[2], value)
