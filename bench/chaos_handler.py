"""The chaos run's receiver handler: records every call, durably, where the checker can read it.

``bridge receive ENTITY --handler bench.chaos_handler:record`` (with ``CHAOS_RECORD_DIR`` set) appends one
JSON line per handler call to ``$CHAOS_RECORD_DIR/recv-<pid>.jsonl`` and fsyncs it before returning, so a
record exists for every call the receiver counts as handled, even when the process is killed right after.
A line holds what the checker needs: MessageId, entity, subscription, namespace, SessionId, PartitionKey,
the run's per-key sequence (application property ``chaos_seq``), the broker's sequence number, TTL,
schedule and the typed check properties, and when the call started (``t``) and wrote its record
(``end``). The body is not recorded.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, BinaryIO

from bridge.core.received import ReceivedMessage

_lock = threading.Lock()
_files: dict[int, BinaryIO] = {}


def _out() -> BinaryIO:
    pid = os.getpid()
    if pid not in _files:
        folder = os.environ["CHAOS_RECORD_DIR"]
        _files[pid] = open(os.path.join(folder, f"recv-{pid}.jsonl"), "ab")  # noqa: SIM115 - process-long
    return _files[pid]


def _plain(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return f"{type(value).__name__}:{value}"


def record(message: ReceivedMessage) -> None:
    """Append the call to this process's record file and fsync it."""
    props = dict(message.application_properties)
    line = {
        "t": time.time(),
        "pid": os.getpid(),
        "id": message.message_id,
        "entity": message.entity,
        "sub": message.subscription,
        "ns": message.namespace,
        "session": message.session_id,
        "pk": message.partition_key,
        "key": props.get("chaos_key"),
        "seq": props.get("chaos_seq"),
        "bseq": message.sequence_number,
        "ttl": message.time_to_live,
        "sched": message.scheduled_enqueue_time_utc.timestamp()
        if message.scheduled_enqueue_time_utc
        else None,
        "enq": message.enqueued_time_utc.timestamp() if message.enqueued_time_utc else None,
        "props": {k: [type(v).__name__, _plain(v)] for k, v in props.items() if k.startswith("chaos_")},
        "body": len(message.body),
        "dc": message.delivery_count,
    }
    with _lock:
        line["end"] = time.time()  # the call's span ends with its record's write (the checker's overlap rule)
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        out = _out()
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
