"""The core stays pure: no driver, framework, I/O or clock imports, no sleeping, no adapter imports.

Every module under ``bridge/core/`` is checked (found by glob, so a new module cannot be forgotten) against
the house rule: "No imports of redis, azure, celery, pyspark or an HTTP framework; never sleeps; takes
``now`` as an argument". Third-party packages are refused wholesale (the core needs none), so are the
standard library's I/O, process, thread and clock modules, and the bridge's own adapters and settings.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "bridge" / "core"
MODULES = sorted(path.relative_to(CORE).as_posix() for path in CORE.rglob("*.py"))

NAMED = {
    # What the house style names, plus their relatives: drivers, task queues, HTTP frameworks and servers.
    "redis", "hiredis", "azure", "uamqp", "proton", "celery", "kombu", "billiard", "pyspark", "pyarrow",
    "starlette", "fastapi", "flask", "django", "aiohttp", "uvicorn", "h11", "httptools", "httpx",
    "requests", "urllib3", "typer", "click", "sentry_sdk", "prometheus_client", "pydantic_settings",
}  # fmt: skip
IO_STDLIB = {
    # The standard library's network, file, process, thread and clock modules.
    "socket", "ssl", "select", "selectors", "asyncio", "http", "urllib.request", "ftplib", "smtplib",
    "socketserver", "xmlrpc", "os", "io", "pathlib", "shutil", "tempfile", "glob", "fcntl", "mmap",
    "sqlite3", "shelve", "dbm", "subprocess", "multiprocessing", "threading", "concurrent", "signal",
    "time", "sched",
}  # fmt: skip
BRIDGE_ALLOWED = ("bridge.core", "bridge.errors")
"""The bridge modules the core may import: itself and the one exception tree (no settings, no adapters)."""
CLOCK_CALLS = {"now", "utcnow", "today", "sleep", "monotonic", "perf_counter"}
"""Attribute calls that read a clock or wait (``datetime.now()``, ``x.sleep(...)``): ``now`` is passed in."""
IO_BUILTINS = {"open", "input", "print", "breakpoint"}


def forbidden_uses(source: str) -> list[str]:
    """Every import or call in ``source`` that breaks the core's purity, as readable strings."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level >= 2:
            found.append(f"line {node.lineno}: relative import out of bridge.core")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from os import environ`` is ``os``; ``from bridge import settings`` is ``bridge.settings``.
            joined = [f"{node.module}.{alias.name}" for alias in node.names]
            modules = joined if node.module == "bridge" else [node.module, *joined]
        for module in modules:
            reason = _import_reason(module)
            if reason:
                found.append(f"line {node.lineno}: import {module} ({reason})")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in CLOCK_CALLS:
                found.append(f"line {node.lineno}: call .{func.attr}() (clock or sleep)")
            elif isinstance(func, ast.Name) and func.id in IO_BUILTINS:
                found.append(f"line {node.lineno}: call {func.id}() (I/O)")
    return found


def _import_reason(module: str) -> str | None:
    top = module.split(".", maxsplit=1)[0]
    if top == "bridge":
        if any(module == allowed or module.startswith(f"{allowed}.") for allowed in BRIDGE_ALLOWED):
            return None
        return "an adapter or the settings; the core gets what it needs passed in"
    if top in NAMED or top not in sys.stdlib_module_names:
        return "a third-party package"
    dotted = module.split(".")
    if any(".".join(dotted[:i]) in IO_STDLIB for i in range(1, len(dotted) + 1)):
        return "I/O, processes, threads or the clock"
    return None


def test_every_core_module_is_checked() -> None:
    # Given the glob, the list cannot go stale; this only guards against the glob finding nothing.
    assert "roles.py" in MODULES and "validation.py" in MODULES
    assert len(MODULES) >= 20


@pytest.mark.parametrize("module", MODULES)
def test_core_module_is_pure(module: str) -> None:
    assert forbidden_uses((CORE / module).read_text()) == []


@pytest.mark.parametrize("module", MODULES)
def test_core_module_stays_small(module: str) -> None:
    assert len((CORE / module).read_text().splitlines()) < 400


@pytest.mark.parametrize(
    "source",
    [
        "import redis",
        "from azure.servicebus import ServiceBusClient",
        "import celery.app",
        "from pyspark.sql import SparkSession",
        "from starlette.requests import Request",
        "import proton",
        "import some_new_http_framework",
        "import socket",
        "from time import sleep",
        "import time",
        "from urllib.request import urlopen",
        "from os import environ",
        "import threading",
        "from bridge.settings import Settings",
        "from bridge.outbox.store import SyncOutbox",
        "from bridge import settings",
        "import bridge.redis.connection",
        "x = datetime.now()",
        "asyncio_loop.sleep(1)",
        "open('f')",
        "from .. import settings",
    ],
)
def test_the_checker_catches(source: str) -> None:
    assert forbidden_uses(source), source


@pytest.mark.parametrize(
    "source",
    [
        "from __future__ import annotations",
        "from dataclasses import dataclass",
        "from urllib.parse import quote",
        "from email.utils import parsedate_to_datetime",
        "from bridge.core.roles import Role",
        "from bridge.errors import ConfigurationError",
        "import uuid",
        "x = datetime.fromtimestamp(now)",
        "from . import roles",
        "from bridge import errors",
    ],
)
def test_the_checker_allows(source: str) -> None:
    assert forbidden_uses(source) == []
