"""The loss table (docs/durability.md, "## Loss table") names, for every path that can drop, duplicate or
reorder a message, the test that shows it. These tests keep the citations true: every row cites at least one
test as ``file::function`` (a trailing ``*`` matches the rest of the name), every cited file exists and every
cited function is defined in it, so a renamed or deleted test cannot leave a row proven by nothing.

A citation's file is under ``tests/integration/`` unless it starts with ``tests/``; ``::name`` alone names
another function of the file cited just before it. Only a row that says the path is outside the bridge may
cite no test (its proof cell is ``—``).
"""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DURABILITY = ROOT / "docs" / "durability.md"
BACKTICKED = re.compile(r"`([^`]+)`")
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")


@dataclass
class Row:
    """One row of the table: what can go wrong, what happens, and the citations of its proof cell."""

    where: str
    what: str
    proof: str
    tests: list[tuple[str, str]] = field(default_factory=list)  # (file, function pattern)
    files: list[str] = field(default_factory=list)  # every cited file, tests or code


def loss_table(markdown: str) -> list[Row]:
    """The rows of the "## Loss table" section (header and separator lines left out)."""
    _, found, rest = markdown.partition("\n## Loss table\n")
    assert found, "docs/durability.md has no '## Loss table' section"
    section = rest.split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith(("| ---", "| Where it could go wrong")):
            continue
        cells = [c.strip() for c in CELL_SEPARATOR.split(line.strip().strip("|"))]
        assert len(cells) == 3, f"a loss-table row needs three cells: {line[:120]}"
        rows.append(cite(Row(*cells)))
    return rows


def cite(row: Row) -> Row:
    """Fill in the row's citations from its proof cell; backticked words that are not paths are prose."""
    last_file = ""
    for token in BACKTICKED.findall(row.proof):
        path, _, function = token.partition("::")
        if not path and function:
            assert last_file, f"'::{function}' follows no file in: {row.where[:80]}"
            path = last_file
        if not path.endswith(".py"):
            assert not token.startswith("test_"), f"{token!r} names no file in: {row.where[:80]}"
            continue
        path = path if path.startswith(("tests/", "bridge/")) else f"tests/integration/{path}"
        last_file = path
        row.files.append(path)
        if function:
            row.tests.append((path, function))
    return row


def defined_tests(path: Path) -> set[str]:
    """The test functions defined in a file (module level or in a class)."""
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def unresolved(row: Row, root: Path = ROOT) -> list[str]:
    """What the row cites that does not exist; a row citing no test at all is a problem too."""
    problems = [f"no such file: {path}" for path in row.files if not (root / path).is_file()]
    for path, pattern in row.tests:
        if (root / path).is_file() and not fnmatch.filter(defined_tests(root / path), pattern):
            problems.append(f"no test matches {path}::{pattern}")
    if not row.tests and not (row.proof == "—" and row.what.startswith("outside the bridge")):
        problems.append("cites no test as file::function")
    return problems


ROWS = loss_table(DURABILITY.read_text())


def test_the_loss_table_has_its_rows() -> None:
    assert len(ROWS) >= 30
    assert sum(1 for row in ROWS if not row.tests) <= 1  # only the namespace's own disaster


@pytest.mark.parametrize("row", ROWS, ids=[f"row{i:02d}" for i in range(1, len(ROWS) + 1)])
def test_every_row_cites_tests_that_exist(row: Row) -> None:
    assert unresolved(row) == [], row.where


def test_a_citation_that_does_not_resolve_is_found() -> None:
    table = (
        "\n## Loss table\n\n| Where it could go wrong | What happens | Proven by |\n| --- | --- | --- |\n"
        "| a | b | `test_workers_failover.py::test_killed_worker_*`, `::test_no_such_test` |\n"
        "| c | d | `test_no_such_file.py::test_x` |\n"
        "| e | f | `tests/unit/test_seen.py` (a file alone proves no row) |\n"
        "| g | h | — |\n"
        "| i | outside the bridge | — |\n"
        "\n## Next\n"
    )
    rows = loss_table(table)
    assert [r.tests for r in rows][:2] == [
        [
            ("tests/integration/test_workers_failover.py", "test_killed_worker_*"),
            ("tests/integration/test_workers_failover.py", "test_no_such_test"),
        ],
        [("tests/integration/test_no_such_file.py", "test_x")],
    ]
    assert [unresolved(r) for r in rows] == [
        ["no test matches tests/integration/test_workers_failover.py::test_no_such_test"],
        ["no such file: tests/integration/test_no_such_file.py"],
        ["cites no test as file::function"],
        ["cites no test as file::function"],
        [],
    ]
    with pytest.raises(AssertionError, match="names no file"):
        loss_table(table.replace("`::test_no_such_test`", "`test_a_bare_name_*`"))
