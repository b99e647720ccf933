"""The replication core stays pure: no driver, framework or clock imports, no sleeping."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "bridge" / "core"
MODULES = [
    "aliasing",
    "backoff",
    "cost",
    "coupling",
    "decisions",
    "error_classes",
    "hash_fields",
    "message_fields",
    "outcomes",
    "paired",
    "replication",
    "roles",
    "syphon",
]
FORBIDDEN = {"redis", "azure", "celery", "kombu", "pyspark", "starlette", "uvicorn", "h11", "time", "asyncio"}


@pytest.mark.parametrize("module", MODULES)
def test_no_io_imports(module: str) -> None:
    tree = ast.parse((CORE / f"{module}.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN


@pytest.mark.parametrize("module", MODULES)
def test_modules_stay_small(module: str) -> None:
    assert len((CORE / f"{module}.py").read_text().splitlines()) < 400
