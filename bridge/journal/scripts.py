"""The journal's append script: bounded, batched, one step.

An event that finds its stream at ``max_length`` is not written; its kind is counted in the overflow hash
instead, in the same step. So the journal can never grow past its bound, never blocks the caller (delivery
goes on when the roller is down), and nothing is lost silently: the ledger shows the overflow counts. The
stream is trimmed by the roll only, after the events are in a file.

Callers send every entry of a batch in one call (``append_args``), one call per journal owner; events that
differ only in their MessageId (a drainer's ``sent`` events of one send call) are one batch entry
(``bridge.core.journal.encode_batch``), so the fields travel and are stored once. The bound and the
overflow count are in entries.
"""

from __future__ import annotations

from collections.abc import Sequence

from bridge.core.journal import JournalEvent
from bridge.redis.scripts import LuaScript

# KEYS: the journal stream, its overflow hash.
# ARGV: max_length, then per event: the number of field/value items n, then the n items (``encode``
#       order: "v", version, "k", kind, ...; so the kind is the 4th item).
# Reply: {written, counted as overflow}.
APPEND = LuaScript(
    """#!lua
local stream, overflow = KEYS[1], KEYS[2]
local max = tonumber(ARGV[1])
local len = redis.call('XLEN', stream)
local pos, written, dropped = 2, 0, 0
local drops = {}
while pos <= #ARGV do
  local n = tonumber(ARGV[pos])
  if len < max then
    redis.call('XADD', stream, '*', unpack(ARGV, pos + 1, pos + n))
    len, written = len + 1, written + 1
  else
    local kind = ARGV[pos + 4]
    drops[kind] = (drops[kind] or 0) + 1
    dropped = dropped + 1
  end
  pos = pos + 1 + n
end
for kind, count in pairs(drops) do
  redis.call('HINCRBY', overflow, kind, count)
end
return {written, dropped}
"""
)


def append_args(max_length: int, entries: Sequence[JournalEvent | Sequence[str]]) -> list[str]:
    """``APPEND``'s ARGV for ``entries``: events, or entries already encoded (``encode_batch``)."""
    args = [str(max_length)]
    for entry in entries:
        items = entry.encode() if isinstance(entry, JournalEvent) else entry
        args.append(str(len(items)))
        args.extend(items)
    return args
