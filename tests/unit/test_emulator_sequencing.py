"""The local Service Bus's delivery-id filter on hand-made frames (no sockets, no proton engine)."""

from __future__ import annotations

from typing import Any

from proton import Condition, Data, symbol, uint, ulong, ushort

from bridge.emulator.amqp import frames
from bridge.emulator.amqp.sequencing import DeliveryIdFilter


def frame(code: int, fields: list[Any], channel: int = 0, payload: bytes = b"") -> bytes:
    """One AMQP frame with a performative ``code`` holding ``fields`` (encoded by proton)."""
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(code)
    data.put_list()
    data.enter()
    for value in fields:
        data.put_object(value)
    data.exit()
    data.exit()
    body = data.encode() + payload
    return (8 + len(body)).to_bytes(4, "big") + bytes((2, 0)) + channel.to_bytes(2, "big") + body


def transfer(handle: int, delivery_id: int, more: bool = False) -> bytes:
    return frame(
        frames.TRANSFER, [uint(handle), uint(delivery_id), b"tag", uint(0), False, more], payload=b"x"
    )


def ids_of(data: bytes) -> list[int | None]:
    """The delivery-ids (first) of the transfers or dispositions in ``data``."""
    out: list[int | None] = []
    at = 0
    while at < len(data):
        size = frames.frame_size(data, at)
        one = data[at : at + size]
        perf = frames.performative(one)
        assert perf is not None
        offsets = frames.field_offsets(one, perf, 2)
        assert offsets is not None
        out.append(frames.read_uint(one, offsets[1]))
        at += size
    return out


def _fed(flt: DeliveryIdFilter, data: bytes) -> bytes:
    """What proton would be given for ``data``, joined."""
    return b"".join(bytes(piece) for piece in flt.incoming(data))


def begin_exchange(flt: DeliveryIdFilter) -> None:
    _fed(flt, frame(frames.BEGIN, [None, uint(0), uint(100), uint(100)]))
    assert flt.scans_output
    flt.outgoing(frame(frames.BEGIN, [ushort(0), uint(0), uint(100), uint(100)], channel=0))


def test_in_sequence_transfers_pass_unchanged_and_output_is_not_scanned() -> None:
    flt = DeliveryIdFilter()
    begin_exchange(flt)
    wire = transfer(1, 0) + transfer(1, 1) + transfer(1, 2)
    assert _fed(flt, wire) == wire
    assert not flt.scans_output


def test_repeated_ids_are_renumbered_and_dispositions_mapped_back() -> None:
    flt = DeliveryIdFilter()
    begin_exchange(flt)
    # Given the SDK's racy numbering: 0, 1, 1, 2 (split across two reads, mid-frame)
    wire = transfer(1, 0) + transfer(1, 1) + transfer(1, 1) + transfer(1, 2)
    fed = _fed(flt, wire[:30]) + _fed(flt, wire[30:])
    # Then proton sees 0, 1, 2, 3
    assert ids_of(fed) == [0, 1, 2, 3]
    assert flt.scans_output
    # And proton's disposition of 1..3 goes back as the client's ids 1, 1, 2
    accepted = [frame(0x24, [])]
    back = flt.outgoing(frame(frames.DISPOSITION, [True, uint(1), uint(3), True, *accepted]))
    assert ids_of(back) == [1, 1, 2]
    assert not flt.scans_output


def test_continuation_frames_keep_the_delivery_id() -> None:
    flt = DeliveryIdFilter()
    begin_exchange(flt)
    wire = transfer(1, 0) + transfer(1, 0) + transfer(2, 0, more=True) + transfer(2, 0)
    assert ids_of(_fed(flt, wire)) == [0, 1, 2, 2]


def test_a_close_without_info_is_reencoded_with_one() -> None:
    flt = DeliveryIdFilter()
    flt.close_condition = Condition("amqp:not-allowed", "no such channel: 7", {symbol("tracking-id"): "t"})
    data = Data()
    closed = flt.outgoing(frame(frames.CLOSE, [None]))
    data.decode(closed[8:])
    described = data.get_object()
    error = described.value[0]
    assert described.descriptor == ulong(frames.CLOSE)
    assert list(error.value) == ["amqp:not-allowed", "no such channel: 7", {symbol("tracking-id"): "t"}]


def test_frames_arriving_a_byte_at_a_time_come_out_whole_and_renumbered() -> None:
    flt = DeliveryIdFilter()
    begin_exchange(flt)
    wire = (
        transfer(1, 0) + transfer(1, 0) + frame(frames.TRANSFER, [uint(1), uint(1), b"t"], payload=b"y" * 600)
    )
    fed = b"".join(_fed(flt, wire[i : i + 1]) for i in range(len(wire)))
    assert ids_of(fed) == [0, 1, 2]
