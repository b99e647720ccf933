"""Shared fixtures.

Redis: one private ``redis-server`` per test session (free port, own temporary data dir, AOF with
``appendfsync always``), never the shared server on 6379. Each test that asks for ``redis_url`` or
``redis_client`` gets it flushed first, so tests do not see each other's keys. A test that needs to kill or
restart Redis starts its own ``RedisServer`` instead of using the session one.

Parallel runs: pyproject's ``addopts`` run the suite on pytest-xdist workers (``-n 4 --dist loadgroup``). Each
worker is its own pytest session, so every session fixture below exists once per worker, and each starts its
processes on free ports with private directories: workers share nothing. The hooks at the end of this file
keep tests that share an expensive fixture on one worker and start the longest work first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from bridge.embedded.redis_server import RedisServer

# pytester runs inner pytest sessions, e.g. to prove fixtures clean up after a failing test.
pytest_plugins = ["pytester"]

# The JVMs the tests start (PySpark's driver: the ``spark`` fixture, and ``bridge report`` run by the demo,
# chaos and ledger tests) each run a few short jobs: the client compiler alone and the serial collector
# halve their CPU time (about 64 s to 30 s for tests/integration/ledger/test_report.py), which matters with
# several workers on two cores. spark-submit adds SPARK_SUBMIT_OPTS to the driver's command line, and child
# processes inherit it. A value set by the caller is kept.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

SHARED_REDIS_PORT = 6379

# No credential in a test may probe the cloud metadata address (169.254.169.254): with IDENTITY_ENDPOINT set
# and no IDENTITY_HEADER, ManagedIdentityCredential is unavailable at once. Tests that sign in with a managed
# identity point both variables at a local namespace's token issuer (tests/integration/entra_support.py).
os.environ.setdefault("IDENTITY_ENDPOINT", "http://127.0.0.1:9/no-managed-identity-in-tests")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """The session's private redis-server; stopped and its data dir removed even when tests fail."""
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of an empty database on the private server (restarted first if a test stopped it)."""
    # FLUSHALL is only ever sent to a server this session started; the guard keeps it that way.
    assert redis_server.port != SHARED_REDIS_PORT
    if not redis_server.running:
        redis_server.start()
    client = redis.Redis(port=redis_server.port, socket_timeout=5)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client (bytes responses) on the clean private database; closed after the test."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        yield client
    finally:
        client.close()


# ---- local Service Bus namespaces -------------------------------------------------------------------
# ``shared_namespace`` is one emulator process for the whole session: tests that only send and receive use
# it with entity names of their own (``unique_name``). Tests that inject faults, kill or restart a
# namespace take ``namespace_factory`` and get processes of their own, stopped even when the test fails.

import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

from bridge.embedded.namespaces import LocalNamespace  # noqa: E402


@pytest.fixture(scope="session")
def shared_namespace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNamespace]:
    """A session-wide local namespace that auto-creates queues on first use."""
    ns = LocalNamespace("shared", data_dir=tmp_path_factory.mktemp("shared-ns"), auto_create=True)
    try:
        ns.start()
        yield ns
    finally:
        ns.close()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """An entity name no other test uses (readable: it starts with the test's name)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-").lower()
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def namespace_factory(tmp_path: Path) -> Iterator[Callable[..., LocalNamespace]]:
    """Start private local namespaces: ``namespace_factory("primary", entities_file=..., ...)``."""
    started: list[LocalNamespace] = []

    def start(name: str = "primary", **options: object) -> LocalNamespace:
        options.setdefault("data_dir", tmp_path / f"ns-{name}-{len(started)}")
        ns = LocalNamespace(name, **options)  # type: ignore[arg-type]
        started.append(ns)
        return ns.start()

    try:
        yield start
    finally:
        for ns in started:
            ns.stop()


@pytest.fixture
def namespace_pair(namespace_factory: Callable[..., LocalNamespace]) -> tuple[LocalNamespace, LocalNamespace]:
    """A primary and a secondary namespace, each its own process (auto-creating queues)."""
    return (namespace_factory("primary", auto_create=True), namespace_factory("secondary", auto_create=True))


# ---- parallel runs (pytest-xdist) --------------------------------------------------------------------
# ``addopts`` carries ``-n 4 --dist loadgroup``. The hooks below decide which tests stay together on one
# worker and in which order the work is handed out; nothing here changes what a test does.
#
# Groups: a test marked ``xdist_group(name)``, a test taking ``spark`` (one JVM, started by one worker), and
# the tests of a module that share a module-scoped fixture (a stack, a namespace, a ledger scenario that
# would otherwise be built once per worker). xdist's own ``loadgroup`` does not work with pytest 9.2 (it
# renames ``item._nodeid``, which pytest no longer reads), so the scheduler below does the grouping: each
# worker writes the groups and estimated costs of its collection to a file the controller names, and the
# controller's scheduler (xdist's LoadScopeScheduling, with these groups as its scopes) reads it.
#
# Order: longest work first. An xdist worker always holds the test it runs plus the next one (it must know
# the next test before it runs the current one), so a test queued behind a long one would wait for it:
# behind an integration test the scheduler queues the cheapest unit left (a unit test), and a worker gets
# the most expensive unit left when all it holds is cheap.

import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

# Rough seconds on two busy cores (from ``--durations``); only the order of the work depends on them.
# Tests that run minutes of real processes on their own, by node id prefix (each test of a file named
# here costs the figure, so a file of many short tests carries a small one):
KNOWN_COST = {
    "tests/integration/test_chaos.py": 200.0,
    "tests/integration/test_demo.py": 200.0,
    "tests/integration/test_up.py": 40.0,
    "tests/integration/test_sdk_samples.py": 60.0,
    "tests/integration/test_up_sas.py": 35.0,
    # 14 tests, about 40 s together; 49 tests, about 150 s together.
    "tests/integration/test_js_admin.py": 3.0,
    "tests/integration/test_ingress_fuzz.py": 3.0,
    "tests/integration/test_workers_entities.py::test_one_message_to_each_of_300": 35.0,
    # The whole stack through a compressed outage (and a disaster) of the primary: bench/outage.py.
    "tests/integration/test_outage_bench.py::test_a_compressed_outage": 150.0,
    "tests/integration/test_outage_bench.py::test_a_short_disaster": 100.0,
    "tests/integration/test_tracing_processes.py": 40.0,
    # A scripted outage with two serve processes sampling and two Chromium page loads.
    "tests/integration/test_status_history.py": 70.0,
    # Two tests sharing an image build: under a minute warm, 8 to 9 minutes on a machine's first run (its
    # debootstrap base, the dependencies' wheels and layer: docs/containers.md). The longest unit of a
    # first run, so it starts first.
    "tests/integration/test_container_images.py": 250.0,
    "tests/integration/test_container_compose.py": 400.0,
    # Whole stacks with Spark at the end (the tutorial's `bridge report`), the live ledger's streaming runs,
    # Redis failovers: long units that must start early, not be left for last.
    "tests/integration/test_tutorial.py": 240.0,
    "tests/integration/ledger/test_live_ledger.py": 180.0,
    "tests/integration/ledger/test_report_hosts.py": 120.0,
    "tests/integration/ledger/test_cluster_stack.py": 60.0,
    "tests/integration/test_failover_harness.py": 40.0,
}
# The rest by the fixtures they take, plus a base cost for an integration or a unit test:
FIXTURE_COST = {"make_stack": 20.0, "spark": 15.0, "namespace_factory": 8.0, "namespace_pair": 8.0}
INTEGRATION_COST = 2.0
UNIT_COST = 0.1
# A worker holding a unit at least this expensive gets the cheapest unit left as its next test.
BUSY_COST = 1.0

_PLAN_FILE = "bridge_xdist_plan"
_plan_dir = pytest.StashKey[Path]()


def _group(item: pytest.Item) -> str | None:
    """The group that keeps ``item`` on one worker with others, or None."""
    marker = item.get_closest_marker("xdist_group")
    if marker is not None:
        return str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))
    if "spark" in getattr(item, "fixturenames", ()):
        return "spark"
    info = getattr(item, "_fixtureinfo", None)
    if info is not None and any(
        defs and defs[-1].scope in ("module", "class", "package") for defs in info.name2fixturedefs.values()
    ):
        return item.nodeid.split("::", 1)[0]
    return None


def _cost(item: pytest.Item) -> float:
    for prefix, seconds in KNOWN_COST.items():
        if item.nodeid.startswith(prefix):
            return seconds
    names = set(getattr(item, "fixturenames", ()))
    cost = sum(seconds for name, seconds in FIXTURE_COST.items() if name in names)
    return cost + (INTEGRATION_COST if item.nodeid.startswith("tests/integration/") else UNIT_COST)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """With xdist disabled (``-p no:xdist``), accept and ignore its options from ``addopts``."""
    if pluginmanager.has_plugin("xdist"):
        return
    group = parser.getgroup("xdist", "distributed testing (pytest-xdist is disabled: options ignored)")
    group._addoption("-n", "--numprocesses", dest="numprocesses", default=0, help="ignored without xdist")
    group.addoption("--dist", dest="dist", default="no", help="ignored without xdist")
    group.addoption("--no-loadscope-reorder", dest="loadscopereorder", action="store_false", default=True)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Named tests only (every argument a ``path::test`` node id) run in this process, unless ``-n`` says
    otherwise: starting the workers takes longer than such a run."""
    if not config.pluginmanager.has_plugin("xdist") or config.args_source != pytest.Config.ArgsSource.ARGS:
        return
    explicit = any(
        arg.startswith("--numprocesses") or (arg.startswith("-n") and not arg.startswith("--"))
        for arg in config.invocation_params.args
    )
    if not explicit and config.args and all("::" in arg for arg in config.args):
        config.option.numprocesses = 0


def pytest_configure(config: pytest.Config) -> None:
    """On the controller of a parallel run: a private directory for the workers' plan files."""
    distributed = config.pluginmanager.has_plugin("xdist") and config.getoption("dist", "no") != "no"
    if distributed and not hasattr(config, "workerinput") and not config.getoption("collectonly"):
        config.stash[_plan_dir] = Path(tempfile.mkdtemp(prefix="bridge-xdist-"))


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = config.stash.get(_plan_dir, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each worker where to write its plan (``node`` is xdist's WorkerController)."""
    directory = node.config.stash.get(_plan_dir, None)
    if directory is not None:
        node.workerinput[_PLAN_FILE] = str(directory / "plan.json")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: order the work units most expensive first; write the groups and costs.

    A work unit is a group or a single test; a group keeps its tests in pytest's order. Every worker
    computes the same order and plan, as xdist requires. Serial runs keep pytest's own order.
    """
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    units: dict[str, list[pytest.Item]] = {}
    groups: dict[str, str] = {}
    for item in items:
        group = _group(item)
        if group is not None:
            groups[item.nodeid] = group
        units.setdefault(f"@{group}" if group is not None else item.nodeid, []).append(item)
    ordered = sorted(units.values(), key=lambda members: -sum(_cost(m) for m in members))
    items[:] = [item for members in ordered for item in members]
    path = workerinput.get(_PLAN_FILE)
    if path is not None:
        plan = {"groups": groups, "costs": {item.nodeid: _cost(item) for item in items}}
        # Every worker writes the same plan; the rename makes each write whole.
        partial = f"{path}.{os.getpid()}"
        Path(partial).write_text(json.dumps(plan))
        os.replace(partial, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the workers' plan (see above)."""
    if config.getoption("dist") != "loadgroup" or _plan_dir not in config.stash:
        return None
    from xdist.scheduler import LoadScopeScheduling

    path = config.stash[_plan_dir] / "plan.json"

    class PlannedScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduling; a scope is a group or one test, and the next test is chosen by cost."""

        _plan: dict[str, dict[str, Any]] | None = None

        def _read_plan(self) -> dict[str, dict[str, Any]]:
            if self._plan is None:
                # Written by the workers during their collection, which is complete before scheduling.
                self._plan = json.loads(path.read_text()) if path.exists() else {"groups": {}, "costs": {}}
            return self._plan

        def _split_scope(self, nodeid: str) -> str:
            groups = self._read_plan()["groups"]
            return f"@{groups[nodeid]}" if nodeid in groups else nodeid

        def _assign_work_unit(self, node: Any) -> None:
            costs = self._read_plan()["costs"]
            assigned = self.assigned_work.setdefault(node, {})
            busy = any(
                sum(costs.get(nodeid, 0.0) for nodeid in unit) >= BUSY_COST
                for unit in assigned.values()
                if not all(unit.values())
            )
            # The queue runs from the most to the least expensive unit.
            scope, work_unit = self.workqueue.popitem(last=busy)
            assigned[scope] = work_unit
            collection = self.registered_collections[node]
            todo = [nodeid for nodeid, done in work_unit.items() if not done]
            node.send_runtest_some([collection.index(nodeid) for nodeid in todo])

    return PlannedScheduling(config, log)
