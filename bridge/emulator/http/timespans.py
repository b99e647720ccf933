"""Durations and times as the Service Bus management API writes them (.NET ``TimeSpan`` and UTC instants).

``TimeSpan`` travels as ISO-8601 with days and a time part only (``PT1M``, ``P14D``); "never" is
``TimeSpan.MaxValue`` = ``P10675199DT2H48M5.4775807S`` (``MAX_DURATION``). The SDK sends what
``isodate.duration_isoformat`` writes, including its rounded "never" (``...5.47758S``), so anything at or
beyond the maximum reads back as ``MAX_DURATION``. Years and months are refused: a TimeSpan has neither.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation

from bridge.emulator.errors import ArgumentError
from bridge.emulator.model.descriptions import MAX_DURATION

MAX_DURATION_TEXT = "P10675199DT2H48M5.4775807S"

_DURATION = re.compile(
    r"^P(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(text: str, field_name: str = "duration") -> dt.timedelta:
    """An ISO-8601 duration (days and time only, as .NET TimeSpan); at most ``MAX_DURATION``."""
    match = _DURATION.match(text.strip())
    if not match or text.strip() in ("P", "PT") or text.strip().endswith("T"):
        raise ArgumentError(f"{field_name}: {text[:40]!r} is not an ISO-8601 duration like PT1M")
    parts = {k: v or "0" for k, v in match.groupdict().items()}
    try:
        seconds = Decimal(parts["s"])
    except InvalidOperation:
        raise ArgumentError(f"{field_name}: bad seconds in {text[:40]!r}") from None
    whole = int(seconds)
    micros = int((seconds - whole) * 1_000_000)  # TimeSpan has 100 ns ticks; truncate like MAX_DURATION
    try:
        value = dt.timedelta(
            weeks=int(parts["w"]),
            days=int(parts["d"]),
            hours=int(parts["h"]),
            minutes=int(parts["m"]),
            seconds=whole,
            microseconds=micros,
        )
    except OverflowError:
        return MAX_DURATION
    return min(value, MAX_DURATION)


def format_duration(value: dt.timedelta) -> str:
    """The ISO-8601 text Azure writes (``PT1M``, ``P14D``, ``P10675199DT2H48M5.4775807S`` for never)."""
    if value >= MAX_DURATION:
        return MAX_DURATION_TEXT
    days, rest = value.days, value.seconds
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"P{days}D" if days else "P"
    clock = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or value.microseconds:
        clock += f"{seconds}.{value.microseconds:06d}".rstrip("0").rstrip(".") + "S"
    if clock:
        text += "T" + clock
    return text if text != "P" else "PT0S"


def format_time(epoch: float) -> str:
    """An epoch timestamp as Atom/XML UTC time."""
    moment = dt.datetime.fromtimestamp(max(epoch, 0.0), dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
