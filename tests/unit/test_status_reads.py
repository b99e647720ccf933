"""The status read model reads through the stores' readers: no module of ``bridge/status/`` names a Redis
key or runs a Redis command itself.

Which keys a store writes, and what their replies look like, is that store's knowledge; a status module that
built a key name (a ``keys`` module, ``ReceiverKeys``, ``named_lease_key``, a ``"bridge:..."`` literal) or
sent a command (``client.xrange``, a pipeline of its own) would hold a second copy of it. It asks the
store's reader instead — a method, or a ``bridge.redis.pipelined.PipelinedRead`` that adds its commands
to the snapshot's shared pipeline, so reading through the owners costs no extra round trip
(docs/architecture.md).

Read from the source (``ast``), like ``test_layering``: every import (also inside functions), every string
constant and every method call of each module.
"""

from __future__ import annotations

import ast
import logging
import threading
import time
from pathlib import Path

import redis.commands.core

ROOT = Path(__file__).resolve().parents[2]
STATUS = ROOT / "bridge" / "status"

_PYTHON_METHODS = {
    name
    for kind in (dict, list, set, str, bytes, Path, threading.Event, threading.Thread, logging.Logger, time)
    for name in dir(kind)
}
REDIS_COMMANDS = {
    name for name in dir(redis.commands.core.CoreCommands) if not name.startswith("_")
} - _PYTHON_METHODS | {"pipeline", "execute_command", "register_script"}
"""Methods of a redis-py client that send a command or start a pipeline, less the names that ``dict``,
``list``, ``Path``, a logger... have too (``get``, ``keys``, ``exists``, ``info``): their keys are caught
instead. ``execute`` is not among them: ``ReadBatch.execute`` is how the status runs the stores' reads."""

KEY_NAMERS = {"tag", "tagged", "ReceiverKeys", "named_lease_key"}
"""Names that build another package's key (besides anything imported from a ``keys`` module)."""


def _method(call: ast.Call) -> str | None:
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def _offences(tree: ast.AST) -> list[str]:
    """What in ``tree`` names a Redis key or runs a Redis command, one line each, sorted."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"imports {a.name}" for a in node.names if a.name.split(".")[-1] == "keys"]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                if module.split(".")[-1] == "keys" or alias.name == "keys" or alias.name in KEY_NAMERS:
                    found.append(f"imports {alias.name} from {module}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("bridge:"):
                found.append(f"names the key {node.value!r}")
        elif isinstance(node, ast.Call) and _method(node) in REDIS_COMMANDS:
            found.append(f"runs {_method(node)}()")
    return sorted(found)


def _status_offences() -> dict[str, list[str]]:
    out = {}
    for path in sorted(STATUS.glob("*.py")):
        offences = _offences(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if offences:
            out[path.relative_to(ROOT).as_posix()] = offences
    return out


def test_the_check_sees_keys_and_commands() -> None:
    source = """
from bridge.outbox import keys
from bridge.state.keys import lease
from bridge.receiving.keys import ReceiverKeys
def read(client):
    pipe = client.pipeline(transaction=False)
    pipe.xrange(keys.outbox("e", 0), count=1)
    pipe.hgetall(ReceiverKeys("e").counts)
    client.get("bridge:{lease:beat}")
    return pipe.execute()
"""
    assert _offences(ast.parse(source)) == [
        "imports ReceiverKeys from bridge.receiving.keys",
        "imports keys from bridge.outbox",
        "imports lease from bridge.state.keys",
        "names the key 'bridge:{lease:beat}'",
        "runs hgetall()",
        "runs pipeline()",
        "runs xrange()",
    ]
    assert len(list(STATUS.glob("*.py"))) > 5


def test_common_python_methods_are_not_taken_for_commands() -> None:
    source = "d.get('a'); d.keys(); xs.append(1); log.info('x'); path.exists(); stop.wait(1); time.time()"
    assert _offences(ast.parse(source)) == []


def test_the_status_read_model_reads_through_the_stores_readers() -> None:
    assert _status_offences() == {}
