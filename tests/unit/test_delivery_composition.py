"""The delivery package is built by composition: no class in ``bridge/delivery`` has more than one base
(``Protocol`` and ``Generic`` aside), and a drainer's state is one dataclass (``TenureState``) of small
ones named for what they hold.

Read from the source (``ast``), as the layering test reads imports: every class of the package is seen,
imported or not.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

DELIVERY = Path(__file__).resolve().parents[2] / "bridge" / "delivery"
TYPING_BASES = {"Protocol", "Generic"}


def _base_name(node: ast.expr) -> str:
    """``Protocol`` for ``Protocol``, ``typing.Protocol`` and ``Generic[T]`` alike."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ast.unparse(node)


def _classes() -> list[tuple[str, ast.ClassDef]]:
    found = []
    for path in sorted(DELIVERY.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = str(path.relative_to(DELIVERY.parent.parent))
        found += [(where, node) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    return found


def test_the_package_has_classes_to_check() -> None:
    names = {node.name for _, node in _classes()}
    assert {"ShardDrainer", "ShardSending", "ShardSettling", "TenureState"} <= names


def test_no_class_in_delivery_mixes_in_bases() -> None:
    mixed = [
        f"{where}: {node.name}({', '.join(ast.unparse(b) for b in node.bases)})"
        for where, node in _classes()
        if len([b for b in node.bases if _base_name(b) not in TYPING_BASES]) > 1
    ]
    assert mixed == []


def test_the_drainer_parts_share_no_base_class() -> None:
    # The drainer, its sending and its settling are collaborators, not parts of one class hierarchy.
    inherits = {node.name: [_base_name(b) for b in node.bases] for _, node in _classes()}
    for name in ("ShardDrainer", "ShardSending", "ShardSettling", "TenureState"):
        assert inherits[name] == [], (name, inherits[name])


def test_the_tenure_state_is_one_dataclass_of_small_ones() -> None:
    from bridge.delivery import tenure

    assert dataclasses.is_dataclass(tenure.TenureState)
    groups = {f.name: f.type for f in dataclasses.fields(tenure.TenureState)}
    # What the tenure carries between batches lives in it, grouped by what it is.
    assert groups == {
        "tenure": "ShardTenure",
        "reading": "ReadPosition",
        "batch": "BatchInFlight",
        "report": "DrainReport",
        "backoff": "ShardBackoff",
        "holds": "KeyHolds",
        "abandoned": "AbandonedPaths",
    }
    fields = {
        name: {f.name for f in dataclasses.fields(getattr(tenure, kind))} for name, kind in groups.items()
    }
    assert {"not_before", "wake_floor", "attempts"} <= fields["backoff"]
    assert {"claim_from", "claiming"} <= fields["reading"]
    assert {"journal", "cost", "health_due"} <= fields["batch"]
    assert {"until", "held_from"} == fields["holds"] and {"until", "ids"} == fields["abandoned"]
    # Small: no group carries more than a dozen fields.
    assert max(len(names) for names in fields.values()) <= 12


def _assigned(tree: ast.AST) -> list[tuple[ast.stmt, ast.expr]]:
    """Every (statement, target) an assignment in ``tree`` writes (``=``, ``+=``, annotated), the
    elements of a tuple or list target one by one."""
    found: list[tuple[ast.stmt, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        while targets:
            target = targets.pop()
            if isinstance(target, ast.Tuple | ast.List):
                targets += target.elts
            else:
                found.append((node, target))
    return found


def _self_assignments(method: ast.FunctionDef) -> set[str]:
    """The attributes ``method`` sets on ``self`` itself (``self.x = ...``, ``self.x += ...``, also in a
    tuple); ``self.state.x = ...`` sets the state's, not the object's."""
    return {
        target.attr
        for _, target in _assigned(method)
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self"
    }


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("ShardDrainer", {"ctx", "state", "settler", "read_ahead", "sending", "settling"}),
        ("ShardSending", {"ctx", "state", "tally"}),
        ("ShardSettling", {"ctx", "state", "sending", "settler", "tally"}),
    ],
)
def test_the_drainer_and_its_collaborators_keep_the_tenure_in_its_state(name: str, parts: set[str]) -> None:
    # Each holds its collaborators, set once by its constructor; what changes between batches is set on
    # the state (``self.state.x = ...``), never on the object.
    (cls,) = [node for _, node in _classes() if node.name == name]
    methods = [node for node in cls.body if isinstance(node, ast.FunctionDef)]
    init = [m for m in methods if m.name == "__init__"]
    assert len(init) == 1
    assert _self_assignments(init[0]) == parts
    later = {m.name: _self_assignments(m) for m in methods if m.name != "__init__"}
    assert {m: found for m, found in later.items() if found} == {}


def _state_writes(tree: ast.AST, groups: tuple[str, ...]) -> list[str]:
    """Each assignment (``=``, ``+=``, annotated, also in a tuple) whose target is, or lies under,
    ``self.state.<group>`` for one of ``groups``: ``self.state.report.sent += 1`` and
    ``self.state.batch.cost = ...`` alike."""
    roots = tuple(f"self.state.{group}" for group in groups)
    found = []
    for node, target in _assigned(tree):
        text = ast.unparse(target)
        if any(text == root or text.startswith((f"{root}.", f"{root}[")) for root in roots):
            found.append(f"line {node.lineno}: {text}")
    return found


@pytest.mark.parametrize("module", ["shard_sending.py", "shard_settling.py"])
def test_the_collaborators_return_a_batch_outcome_and_the_drainer_folds_it(module: str) -> None:
    # The batch's tallies (report counts, cost, the epoch seen) are the collaborators' outputs: the
    # drainer, the one owner of the state, folds them into ``DrainReport`` and ``BatchInFlight``.
    path = DELIVERY / module
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    assert _state_writes(tree, ("report", "batch")) == []
