"""The azure-servicebus SDK's own samples, run unmodified against the local stack their sign-in needs.

    python -m bench.samples [--only NAME ...] [--timeout 120] [--jobs 2]

A sample that sleeps longer than ``--timeout`` by design (the lock-renewal samples) runs under its designed
sleeps plus ``WORK_MARGIN`` instead (``timeout_for``).

Downloads the ``azure-servicebus`` source distribution (``SDK_VERSION``) from PyPI once per machine into
the test cache (``tests/integration/rest_clients.py``: ``$BRIDGE_TEST_CACHE``, else
``~/.cache/bridge-tests``) — the samples are never part of this repository. The samples that sign in with
Entra ID run against the stack of ``bridge up --entra`` (Redis, two namespaces, the token issuer, SAS
refused, AMQPS on 5671 and HTTPS on 443 where free; ``bridge/embedded/entra.py``), those that sign in with
SAS (``SAS_SAMPLES``) then against the stack of plain ``bridge up`` (SAS over AMQPS on 5671 and HTTPS on
443; ``bridge/embedded/trust.py``), each with the entities the samples name. Each sample runs as
``python sample.py`` in a shell that sourced the stack's ``bridge.env`` (``set -a; . bridge.env``: the
namespace, how to sign in to it, the certificates) plus the ``SERVICEBUS_*`` variables the samples read,
each sample with entities of its own so none sees another's leftovers. It prints one row per sample:
``pass``, ``fail`` with the last error line, or ``excluded`` with the reason (``EXCLUDED``). The exit
status is 1 when a sample that is not excluded failed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bridge.embedded import up
from bridge.embedded.stack import LocalStack
from tests.integration.proxy_support import Tinyproxy
from tests.integration.rest_clients import _install, cache_dir

SDK_VERSION = "7.15.0"
SDIST = f"azure_servicebus-{SDK_VERSION}"
AIOHTTP_VERSION = "3.14.5"
PROXY_PORT = 8899
SDK_PORTS = (5671, 443)
PORT_WAIT = 120.0


class PortsTaken(RuntimeError):
    """Another process holds 5671 or 443: the samples, which name no port, would reach it instead."""


SAMPLES = (
    "async_samples/authenticate_client_connstr_async.py",
    "async_samples/authenticate_using_azure_named_key_credential_async.py",
    "async_samples/authenticate_using_azure_sas_credential_async.py",
    "async_samples/auto_lock_renew_async.py",
    "async_samples/client_identity_authentication_async.py",
    "async_samples/connection_to_custom_endpoint_address_async.py",
    "async_samples/deadletter_messages_and_correct_async.py",
    "async_samples/list_sessions_async.py",
    "async_samples/mgmt_queue_async.py",
    "async_samples/mgmt_rule_async.py",
    "async_samples/mgmt_subscription_async.py",
    "async_samples/mgmt_topic_async.py",
    "async_samples/proxy_async.py",
    "async_samples/receive_deadlettered_messages_async.py",
    "async_samples/receive_deferred_message_queue_async.py",
    "async_samples/receive_iterator_queue_async.py",
    "async_samples/receive_peek_async.py",
    "async_samples/receive_queue_async.py",
    "async_samples/receive_subscription_async.py",
    "async_samples/sample_code_servicebus_async.py",
    "async_samples/schedule_messages_and_cancellation_async.py",
    "async_samples/schedule_topic_messages_and_cancellation_async.py",
    "async_samples/send_and_receive_amqp_annotated_message_async.py",
    "async_samples/send_queue_async.py",
    "async_samples/send_topic_async.py",
    "async_samples/session_pool_receive_async.py",
    "async_samples/session_send_receive_async.py",
    "async_samples/topic_subscription_with_rule_operations_async.py",
    "sync_samples/authenticate_client_connstr.py",
    "sync_samples/authenticate_using_azure_named_key_credential.py",
    "sync_samples/authenticate_using_azure_sas_credential.py",
    "sync_samples/auto_lock_renew.py",
    "sync_samples/client_identity_authentication.py",
    "sync_samples/connection_to_custom_endpoint_address.py",
    "sync_samples/deadletter_messages_and_correct.py",
    "sync_samples/failure_and_recovery.py",
    "sync_samples/generate_sas_token_and_authenticate_client.py",
    "sync_samples/list_sessions.py",
    "sync_samples/mgmt_queue.py",
    "sync_samples/mgmt_rule.py",
    "sync_samples/mgmt_subscription.py",
    "sync_samples/mgmt_topic.py",
    "sync_samples/proxy.py",
    "sync_samples/receive_deadlettered_messages.py",
    "sync_samples/receive_deferred_message_queue.py",
    "sync_samples/receive_iterator_queue.py",
    "sync_samples/receive_peek.py",
    "sync_samples/receive_queue.py",
    "sync_samples/receive_subscription.py",
    "sync_samples/sample_code_servicebus.py",
    "sync_samples/schedule_messages_and_cancellation.py",
    "sync_samples/schedule_topic_messages_and_cancellation.py",
    "sync_samples/send_and_receive_amqp_annotated_message.py",
    "sync_samples/send_queue.py",
    "sync_samples/send_topic.py",
    "sync_samples/session_pool_receive.py",
    "sync_samples/session_send_receive.py",
    "sync_samples/topic_subscription_with_rule_operations.py",
)
"""Every sample in the sdist (``all_samples`` checks the download against it)."""

FOREVER = "never ends by design: iterates a receiver made without max_wait_time, which waits forever"
SAS_SAMPLES = (
    "sync_samples/authenticate_client_connstr.py",
    "async_samples/authenticate_client_connstr_async.py",
    "sync_samples/authenticate_using_azure_named_key_credential.py",
    "async_samples/authenticate_using_azure_named_key_credential_async.py",
    "sync_samples/authenticate_using_azure_sas_credential.py",
    "async_samples/authenticate_using_azure_sas_credential_async.py",
    "sync_samples/generate_sas_token_and_authenticate_client.py",
    "sync_samples/sample_code_servicebus.py",
    "async_samples/sample_code_servicebus_async.py",
)
"""Samples that sign in with SAS (a key, a token, a connection string): the Entra-only stack refuses SAS, so
they run against plain ``bridge up`` (``sas_stack``: SAS over AMQPS on 5671, HTTPS on 443)."""

EXCLUDED: dict[str, str] = {
    "sync_samples/connection_to_custom_endpoint_address.py": (
        "placeholders to edit: custom_endpoint_address='sb://<custom_endpoint_hostname>:<port>'"
    ),
    "async_samples/connection_to_custom_endpoint_address_async.py": (
        "placeholders to edit: custom_endpoint_address='sb://<custom_endpoint_hostname>:<port>'"
    ),
    "sync_samples/receive_iterator_queue.py": FOREVER,
    "async_samples/receive_iterator_queue_async.py": FOREVER,
    "sync_samples/failure_and_recovery.py": FOREVER,
    "sync_samples/session_pool_receive.py": "never ends by design: its session workers loop forever",
    "async_samples/session_pool_receive_async.py": "never ends by design: its session workers loop forever",
    "async_samples/proxy_async.py": (
        "an SDK bug: the async WebSocket transport hands aiohttp the proxy as 'host:port' without a scheme"
    ),
}
"""Samples not run, with why (``docs/local-servicebus.md`` explains each)."""

REPRESENTATIVE = (
    "sync_samples/send_queue.py",
    "sync_samples/receive_queue.py",
    "async_samples/send_topic_async.py",
    "sync_samples/receive_subscription.py",
    "sync_samples/session_send_receive.py",
    "sync_samples/receive_deferred_message_queue.py",
    "sync_samples/auto_lock_renew.py",
)
"""The short set the default test suite runs: queue, topic/subscription, session, deferral, lock renewal."""


@dataclass(frozen=True)
class Result:
    """One sample's outcome: ``pass``, ``fail`` (``detail``: the last error line) or ``excluded``."""

    sample: str
    result: str
    detail: str = ""
    seconds: float = 0.0


def samples_root() -> Path:
    """The sdist's ``samples`` folder, downloaded from PyPI and unpacked once per machine."""
    name = f"{SDIST}-sdist"
    staging = cache_dir() / f"{name}.partial"
    ready = cache_dir() / name / SDIST / "samples"
    pip = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--quiet"]
    _install(
        name,
        ready,
        [
            [*pip, f"azure-servicebus=={SDK_VERSION}", "-d", str(staging)],
            ["tar", "xzf", str(staging / f"{SDIST}.tar.gz"), "-C", str(staging)],
        ],
        staging,
    )
    return ready


def async_deps() -> Path:
    """``aiohttp`` (what the samples' README installs for the async samples: ``azure.identity.aio`` needs it),
    installed once per machine into the cache and put on the samples' ``PYTHONPATH`` only: the bridge
    itself does not use it."""
    name = f"samples-aiohttp-{AIOHTTP_VERSION}"
    staging = cache_dir() / f"{name}.partial"
    ready = cache_dir() / name / "aiohttp"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(staging)]
    _install(name, ready, [[*pip, f"aiohttp=={AIOHTTP_VERSION}"]], staging)
    return ready.parent


def all_samples(root: Path) -> list[str]:
    """Every sample, as ``sync_samples/x.py`` / ``async_samples/x_async.py``."""
    return sorted(str(p.relative_to(root)) for p in root.glob("*_samples/*.py"))


def slug(sample: str) -> str:
    """The entity-name prefix of one sample (``sync_samples/send_queue.py`` -> ``sync-send-queue``)."""
    folder, file = sample.split("/")
    return f"{folder.split('_')[0]}-{file.removesuffix('.py').replace('_', '-')}"


def entities_toml(samples: Iterable[str]) -> str:
    """Per sample: a queue, a session queue, and a topic with one subscription."""
    lines: list[str] = []
    for sample in samples:
        s = slug(sample)
        lines += [f"[queues.{s}-q]", f"[queues.{s}-sq]", "requires_session = true"]
        lines += [f"[topics.{s}-t]", f"[topics.{s}-t.subscriptions.sub]"]
    return "\n".join(lines) + "\n"


def sample_env(sample: str) -> dict[str, str]:
    """The ``SERVICEBUS_*`` variables the samples read (``EnvironmentCredential``'s are in the env file)."""
    s = slug(sample)
    return {
        "SERVICEBUS_QUEUE_NAME": f"{s}-q",
        "SERVICEBUS_SESSION_QUEUE_NAME": f"{s}-sq",
        "SERVICEBUS_SESSION_ID": "session-1",
        "SERVICEBUS_TOPIC_NAME": f"{s}-t",
        "SERVICEBUS_SUBSCRIPTION_NAME": "sub",
    }


def last_error_line(output: str) -> str:
    """The line that says what went wrong: the last exception line, else the last line printed."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "Exception" in line or "Timeout" in line]
    return (errors or lines or ["(no output)"])[-1][:300]


_SLEEP = re.compile(r"\b(?:asyncio|time)\.sleep\(\s*(\d+(?:\.\d+)?)\s*\)")
WORK_MARGIN = 120.0
"""Seconds a sample gets on top of its designed sleeps: sign-in, sends, receives that wait up to
``max_wait_time``, on a loaded machine (the async ``auto_lock_renew`` took 21 s more than its sleeps alone,
the sync one 49 s with another sample beside it)."""


def designed_seconds(root: Path, sample: str) -> float:
    """How long a sample sleeps by design: the sum of its literal ``asyncio.sleep``/``time.sleep`` calls.

    The lock-renewal samples sleep for minutes on purpose (``auto_lock_renew_async.py``: 4 x 100 s + 80 s),
    so a fixed per-sample timeout below that kills them mid-sleep, which looks like a hang."""
    return sum(float(seconds) for seconds in _SLEEP.findall((root / sample).read_text()))


def timeout_for(root: Path, sample: str, floor: float) -> float:
    """The bound a sample runs under: ``floor``, raised to its designed sleeps plus ``WORK_MARGIN``."""
    return max(floor, designed_seconds(root, sample) + WORK_MARGIN)


def run_sample(root: Path, sample: str, env_file: Path, extra: dict[str, str], timeout: float) -> Result:
    """``python sample.py`` in a shell that sourced ``env_file``, in the sample's folder, bounded."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("BRIDGE_", "AZURE_", "IDENTITY_"))}
    clean.pop("SERVICEBUS_FULLY_QUALIFIED_NAMESPACE", None)
    clean["PYTHONPATH"] = str(async_deps())
    script = f'set -a; . "{env_file}"; set +a; exec "$@"'
    path = root / sample
    began = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-c", script, "sample", sys.executable, path.name],
        cwd=path.parent,
        env={**clean, **extra, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return Result(sample, "fail", f"no end within {timeout:.0f} s: {last_error_line(output)}", timeout)
    seconds = time.monotonic() - began
    if proc.returncode == 0 and "Traceback" not in output:
        return Result(sample, "pass", seconds=seconds)
    return Result(sample, "fail", last_error_line(output), seconds)


@contextmanager
def entra_stack(samples: Iterable[str], base: Path | None = None) -> Iterator[tuple[LocalStack, Path]]:
    """The namespaces of ``bridge up --entra`` with the samples' entities, and its ``bridge.env``."""
    with _stack(samples, base, entra=True) as ready:
        yield ready


@contextmanager
def sas_stack(samples: Iterable[str], base: Path | None = None) -> Iterator[tuple[LocalStack, Path]]:
    """The namespaces of plain ``bridge up`` (SAS on 5671 and 443) with the samples' entities, and its env."""
    with _stack(samples, base, entra=False) as ready:
        yield ready


@contextmanager
def _stack(samples: Iterable[str], base: Path | None, *, entra: bool) -> Iterator[tuple[LocalStack, Path]]:
    base = base or Path(tempfile.mkdtemp(prefix="bridge-samples-"))
    entities = base / "sample-entities.toml"
    base.mkdir(parents=True, exist_ok=True)
    entities.write_text(entities_toml(samples))
    local = LocalStack(base, entities={}, namespace_entities_file=entities, entra=entra, standard_ports=True)
    # proxy.py dials an HTTP proxy at 127.0.0.1:8899 with Basic auth admin/123456 (its own placeholders)
    proxy = Tinyproxy(base / "proxy", "admin", "123456")
    proxy.port = PROXY_PORT
    try:
        wait_ports_free(SDK_PORTS, PORT_WAIT)
        local.start()
        endpoints = local.primary.endpoints
        served = set((endpoints.amqps_ports or "").split(",")) if endpoints else set()
        if not {str(p) for p in SDK_PORTS} <= served:
            raise PortsTaken(
                f"ports {SDK_PORTS} are not all free (served: {sorted(served)}): the SDK dials 5671 for "
                "AMQPS whatever port the namespace names, and the administration client 443"
            )
        if entra and shutil.which("tinyproxy") and port_free(PROXY_PORT):
            proxy.start()
        yield local, up.write_env_file(local)
    finally:
        proxy.stop()
        local.stop()


def wait_ports_free(ports: Iterable[int], timeout: float) -> None:
    """Wait (bounded) for another local stack holding the SDK's ports to end; the caller then tries."""
    deadline = time.monotonic() + timeout
    while not all(port_free(p) for p in ports) and time.monotonic() < deadline:
        time.sleep(1)


def port_free(port: int) -> bool:
    """Whether nothing listens on ``127.0.0.1:port``."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _on_entra(samples: list[str]) -> list[str]:
    return [s for s in samples if s not in SAS_SAMPLES]


def _on_sas(samples: list[str]) -> list[str]:
    return [s for s in samples if s in SAS_SAMPLES]


def run_all(root: Path, samples: list[str], env_file: Path, timeout: float, jobs: int) -> list[Result]:
    """Every sample (excluded ones reported, not run), ``jobs`` at a time, in ``samples`` order."""

    def one(sample: str) -> Result:
        if sample in EXCLUDED:
            return Result(sample, "excluded", EXCLUDED[sample])
        bound = timeout_for(root, sample, timeout)
        return run_sample(root, sample, env_file, sample_env(sample), bound)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, samples))


def table(results: list[Result]) -> str:
    """A Markdown table: sample, result, detail."""
    rows = ["| Sample | Result | Detail |", "| --- | --- | --- |"]
    for r in results:
        took = f" ({r.seconds:.1f} s)" if r.result == "pass" else ""
        detail = r.detail.replace("|", "\\|")
        rows.append(f"| `{r.sample}` | {r.result}{took} | {detail} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.samples", description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="run these samples only (e.g. sync_samples/send_queue.py)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds per sample (default 120; a sample that sleeps longer by design gets its sleeps + 120)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="samples run at once (default 2)")
    args = parser.parse_args(argv)
    root = samples_root()
    samples = all_samples(root)
    if args.only:
        unknown = sorted(set(args.only) - set(samples))
        if unknown:
            parser.error(f"no such sample in azure-servicebus {SDK_VERSION}: {', '.join(unknown)}")
        samples = [s for s in samples if s in args.only]
    results: list[Result] = []
    for group, stack in ((_on_entra(samples), entra_stack), (_on_sas(samples), sas_stack)):
        if group:
            with stack(group) as (_, env_file):
                results += run_all(root, group, env_file, args.timeout, args.jobs)
    results.sort(key=lambda r: samples.index(r.sample))
    print(table(results))
    counts = {k: sum(r.result == k for r in results) for k in ("pass", "fail", "excluded")}
    print(f"\nazure-servicebus {SDK_VERSION} samples: {counts['pass']} pass, {counts['fail']} fail, "
          f"{counts['excluded']} excluded")  # fmt: skip
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
