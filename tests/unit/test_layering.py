"""The import graph of ``bridge``, ``workers`` and ``tasks``: no cycles, and the layers import downwards only.

Read from the source (``ast``), not by importing, so it is fast and sees every module. An edge is an import
executed when the module is loaded: module level and class bodies, including ``try`` / ``if`` blocks, but
not imports inside functions (deliberately deferred, e.g. optional extras) or under ``TYPE_CHECKING``.
Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so those are edges too.

The Azure SDK boundary is stricter: only the adapter (``bridge.servicebus``) may import ``azure.servicebus``
or ``azure.identity`` at all — types too, under ``TYPE_CHECKING`` and inside functions as well.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bridge", "workers", "tasks")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {
    _module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _load_time_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node):
                yield from _load_time_imports(node.body)
            yield from _load_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _load_time_imports(block)
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from _load_time_imports(node.body)


def _with_parents(name: str) -> Iterator[str]:
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        yield ".".join(parts[:end])


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """Every module that ``node`` needs loaded: the named modules and their packages, the submodules named.

    A module's own packages are skipped as mere parents: they were entered before it, which is enough
    unless it imports a *name* from one (``from bridge.x import Thing`` inside ``bridge.x.y``): then that
    package's ``__init__`` must have finished, and it is an edge.
    """
    own = set(_with_parents(module))
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield from (p for p in _with_parents(alias.name) if p not in own)
        return
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = str(node.module)
    yield from (p for p in _with_parents(base) if p not in own)
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in MODULES else base


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = {t for node in _load_time_imports(tree.body) for t in _imported(module, node)}
        graph[module] = {t for t in targets if t in MODULES and t != module}
    return graph


GRAPH = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root, targets in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(targets)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _imports_of(prefix: str) -> dict[str, set[str]]:
    """Every import (also deferred ones inside functions) of the modules under ``prefix``, by module."""
    out: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        if module == prefix or module.startswith(prefix + "."):
            tree = ast.parse(path.read_text(), str(path))
            nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
            out[module] = {t for node in nodes for t in _imported(module, node)}
    return out


def test_the_graph_sees_the_project() -> None:
    # A parser that missed every import would find no cycle; make sure it sees known edges.
    assert "bridge.redis.errors" in GRAPH["bridge.outbox.store"]
    assert "bridge.outbox.keys" in GRAPH["bridge.outbox.store"]  # ``from bridge.outbox import keys``
    assert "bridge.outbox" in GRAPH["bridge.http.ingress"]  # the package runs before its modules
    assert len(MODULES) > 50


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("bridge.state", "bridge.outbox"),  # siblings on top of bridge.redis
        ("bridge.outbox", "bridge.state"),
        ("bridge.journal", "bridge.outbox"),
        ("bridge.journal", "bridge.state"),
        ("bridge.http", "redis"),  # HTTP reaches Redis only through the outbox
        ("bridge.http", "bridge.redis"),  # ... its opener included (``bridge.outbox.opener``)
        ("bridge.http", "bridge.state"),
        ("bridge.http", "bridge.journal"),
        ("bridge.redis", "bridge.outbox"),
        ("bridge.redis", "bridge.state"),
        ("bridge.core", "bridge.redis"),
        ("bridge.delivery", "bridge.paired"),  # the ping and the syphon build on delivery, not the reverse
    ],
)
def test_layers_import_downwards_only(layer: str, forbidden: str) -> None:
    offenders = {
        module: sorted(t for t in targets if t == forbidden or t.startswith(forbidden + "."))
        for module, targets in _imports_of(layer).items()
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_the_redis_layer_builds_on_the_error_tree_only() -> None:
    project = {
        t
        for targets in _imports_of("bridge.redis").values()
        for t in targets
        if t.split(".")[0] in PACKAGES and t in MODULES
    }
    assert project <= {"bridge", "bridge.errors"} | {m for m in MODULES if m.startswith("bridge.redis")}


ADAPTER = "bridge.servicebus"
SDK_PACKAGES = ("azure.servicebus", "azure.identity")


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _absolute_imports(tree: ast.AST) -> set[str]:
    """Every absolute module name imported anywhere in ``tree``: at load time, in functions, under
    ``TYPE_CHECKING``; ``from a import b`` counts as ``a.b`` too, and so does ``import_module("a.b")``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


TREES = {module: ast.parse(path.read_text(), str(path)) for module, path in MODULES.items()}
SDK_IMPORTERS: dict[str, dict[str, list[str]]] = {
    sdk: {m: sorted(n for n in _absolute_imports(tree) if _within(n, sdk)) for m, tree in TREES.items()}
    for sdk in SDK_PACKAGES
}


def test_the_sdk_import_finder_sees_the_adapter() -> None:
    assert "azure.servicebus" in SDK_IMPORTERS["azure.servicebus"]["bridge.servicebus.clients"]
    assert _absolute_imports(ast.parse("def f():\n    from azure import identity\n")) >= {"azure.identity"}
    assert "azure.servicebus.amqp" in _absolute_imports(ast.parse("import_module('azure.servicebus.amqp')"))


@pytest.mark.parametrize("sdk", SDK_PACKAGES)
def test_only_the_servicebus_adapter_imports_the_azure_sdk(sdk: str) -> None:
    outside = {m: names for m, names in SDK_IMPORTERS[sdk].items() if names and not _within(m, ADAPTER)}
    assert sorted(outside) == [], outside


def _load_time_edges(source: str, target: str) -> dict[str, list[str]]:
    """The load-time imports of ``target``'s modules by ``source``'s modules, by importing module."""
    edges = {m: sorted(t for t in GRAPH[m] if _within(t, target)) for m in GRAPH if _within(m, source)}
    return {m: targets for m, targets in edges.items() if targets}


def test_delivery_and_paired_do_not_import_each_other_at_load_time() -> None:
    # The package-cycle rule: one of the two may build on the other, never both ways round.
    both_ways = {
        "bridge.delivery -> bridge.paired": _load_time_edges("bridge.delivery", "bridge.paired"),
        "bridge.paired -> bridge.delivery": _load_time_edges("bridge.paired", "bridge.delivery"),
    }
    assert not all(both_ways.values()), both_ways


# ---- packages: no cycle between them, and each imports only packages of its own layer or below -----------


def _package(module: str) -> str:
    """The package a module belongs to: ``bridge.<sub>`` for a subpackage, the module itself for a module
    directly under ``bridge/`` (``bridge.settings``), ``workers`` and ``tasks`` as wholes."""
    parts = module.split(".")
    if parts[0] != "bridge" or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2])


def _package_graph() -> dict[str, set[str]]:
    """Every import between packages, deferred ones inside functions included."""
    graph: dict[str, set[str]] = {}
    for root in PACKAGES:
        for module, targets in _imports_of(root).items():
            source = _package(module)
            edges = graph.setdefault(source, set())
            edges.update(_package(t) for t in targets if t in MODULES and _package(t) != source)
    return graph


PACKAGE_GRAPH = _package_graph()

LAYERS: dict[str, int] = {
    # 0: the pure core and the one exception tree.
    "bridge.core": 0, "bridge.errors": 0,
    # 1: settings, the per-process thread pools, the local Service Bus (imports only the exception tree).
    "bridge.settings": 1, "bridge.namespace_settings": 1, "bridge.receiver_settings": 1,
    "bridge.journal_settings": 1, "bridge.history_settings": 1, "bridge.stray_variables": 1,
    "bridge.process_threads": 1,
    "bridge.emulator": 1,
    # 2: the adapters of outside systems that build on nothing of ours but the core, and the instruments
    # (metrics, spans, transitions, Sentry, logs) that every layer above records into.
    "bridge.redis": 2, "bridge.servicebus": 2, "bridge.observability": 2, "bridge.embedded": 2,
    # 3: the journal on Redis; 4: the outbox (which journals) and the replication state, siblings.
    "bridge.journal": 3,
    "bridge.outbox": 4, "bridge.state": 4,
    # 5: what reads and writes the stores: the doors, the send side, the receiving end, reports, and the
    # status read model (bridge status, the status page, the scrape).
    "bridge.producer": 5, "bridge.http": 5, "bridge.delivery": 5, "bridge.receiving": 5,
    "bridge.ledger": 5, "bridge.status": 5,
    # 6: paired mode's beat work builds on the send side.
    "bridge.paired": 6,
    # 7: wiring: the package's front door, the Celery app and its tasks, the command line.
    "bridge": 7, "workers": 7, "tasks": 8, "bridge.cli": 9,
}  # fmt: skip
"""Each package's layer, as docs/architecture.md draws them: a package imports only its own layer or lower."""


def test_every_package_has_a_layer() -> None:
    packages = {_package(m) for m in MODULES}
    assert sorted(packages - set(LAYERS)) == []
    assert sorted(set(LAYERS) - packages) == []


def test_packages_import_their_own_layer_or_below() -> None:
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in PACKAGE_GRAPH.items()
        for target in targets
        if LAYERS[target] > LAYERS[source]
    )
    assert upward == []


def test_the_package_graph_sees_the_layers() -> None:
    # A parser that missed the imports would pass the two rules; make sure it sees known edges.
    assert {"bridge.redis", "bridge.journal"} <= PACKAGE_GRAPH["bridge.outbox"]
    assert "bridge.outbox" in PACKAGE_GRAPH["bridge.status"]
    assert "bridge.cli" in PACKAGE_GRAPH and "bridge.embedded" in PACKAGE_GRAPH["bridge.cli"]


def test_no_import_cycles_between_packages() -> None:
    graph = {p: PACKAGE_GRAPH.get(p, set()) for p in LAYERS}
    assert _cycles(graph) == []
