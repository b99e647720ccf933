"""``bridge up``: the stack starts, carries a message from ingress to receiver, and Ctrl-C stops it all."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.embedded.stack import wait_until
from tests.integration.operations_support import scrape


def _pids_using(path: Path) -> dict[int, str]:
    """Every process of the stack under ``path``: its command line, environment or working directory names
    ``path`` (the ledger and its JVM are named only in their environment, a Redis server only in its
    working directory). pid → command line."""
    found = {}
    needle = str(path).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            cwd = os.readlink(f"/proc/{pid}/cwd").encode()
        except OSError:
            continue
        if any(needle in part for part in (cmdline, environ, cwd)):
            found[int(pid)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def _processes_using(path: Path) -> list[str]:
    return list(_pids_using(path).values())


def _kill_all(proc: subprocess.Popen[str], path: Path) -> None:
    """``kill -9`` ``bridge up`` and every process of its stack (they run in sessions of their own: killing
    ``bridge up`` alone would leave them loading the machine for the rest of the suite)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    for pid in _pids_using(path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _ctrl_c(proc: subprocess.Popen[str], path: Path, timeout: float = 90) -> str:
    """Ctrl-C ``bridge up`` and wait for its exit; what it printed meanwhile. A stack that does not stop in
    ``timeout`` fails with what still ran and what it printed (and is killed)."""
    proc.send_signal(signal.SIGINT)
    try:
        remaining, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        printed = exc.output or ""
        left = _processes_using(path)
        state = _process_state(proc)
        # bridge up prints every thread's stack on SIGUSR1: where its main thread is
        proc.send_signal(signal.SIGUSR1)
        try:
            stacks, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired as again:
            stacks = again.output or ""
        _kill_all(proc, path)
        text = "".join(t if isinstance(t, str) else t.decode(errors="replace") for t in (printed, stacks))
        raise AssertionError(
            f"bridge up did not stop within {timeout:g} s; still running: {left}; its state: {state}; "
            f"it printed: {text[-6000:]}"
        ) from None
    return remaining


def _process_state(proc: subprocess.Popen[str]) -> str:
    """The kernel's view of a process that did not stop: its state, signal masks (is SIGINT caught,
    blocked or ignored?), what it waits in, and the machine's load."""
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        wchan = Path(f"/proc/{proc.pid}/wchan").read_text()
        load = Path("/proc/loadavg").read_text().strip()
    except OSError as exc:
        return f"unreadable ({exc})"
    fields = [line for line in status if line.startswith(("State", "SigBlk", "SigIgn", "SigCgt", "Threads"))]
    return f"{'; '.join(fields)}; wchan {wchan}; load {load}"


def _start_up(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """``bridge up --data-dir tmp_path FLAGS`` with no ``BRIDGE_*`` of this process, started as a shell's
    background job is (SIGINT ignored), and what it printed until the stack was up (its "Ctrl-C stops
    everything" line) or 120 s passed."""
    # As a shell starts a background job (SIGINT and SIGQUIT ignored), so that Ctrl-C must stop it anyway
    command = [sys.executable, "-m", "bridge.cli.main", "up", "--data-dir", str(tmp_path), *flags]
    proc = subprocess.Popen(
        ["sh", "-c", 'trap "" INT QUIT; exec "$@"', "sh", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C stops everything" in line:
                break
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise
    return proc, "".join(lines)


def test_bridge_up_runs_the_stack_until_ctrl_c(tmp_path: Path) -> None:
    # --tls: the ingress speaks HTTPS with the self-signed pair `bridge up` makes (plain HTTP: the demo)
    proc, out = _start_up(tmp_path, "--concurrency", "1", "--tls")
    try:
        url = re.search(r"^ingress\s+(https://\S+)", out, re.M)
        env_file = re.search(r"^settings\s+(\S+)", out, re.M)
        metrics = dict(
            (name, link) for link, name in re.findall(r"^metrics\s+(https?://\S+)\s+\((\S+)\)", out, re.M)
        )
        assert url and env_file, out
        assert {"worker", "beat", "beat-2", "ingress", "orders"} <= set(metrics), out
        settings = Path(env_file.group(1))
        assert settings.stat().st_mode & 0o777 == 0o600
        assert "BRIDGE_REDIS_URL=" in settings.read_text()
        ca_file = re.search(r"^BRIDGE_INGRESS_CA_FILE='(\S+)'$", settings.read_text(), re.M)
        assert ca_file, settings.read_text()
        trust = ssl.create_default_context(cafile=ca_file.group(1))

        # Given the running stack, when a message is posted, then the receiver of the entity hands it over.
        answer = httpx.post(
            f"{url.group(1)}/v1/entities/orders/messages", json={"body": "up"}, timeout=10, verify=trust
        )
        assert answer.status_code == 202
        message_id = answer.json()["message_id"]
        receiver_log = tmp_path / "receive-orders.log"
        wait_until(
            lambda: receiver_log.exists() and message_id in receiver_log.read_text(), 60, 0.5, "received"
        )
        assert httpx.get(f"{url.group(1)}/status", timeout=10, verify=trust).status_code == 200
        worker = scrape(metrics["worker"])
        assert worker.value("bridge_send_messages_total", entity="orders", result="accepted") == 1
        receiver = scrape(metrics["orders"])
        assert receiver.value("bridge_receiver_messages_total", entity="orders", counter="handled") == 1

        # When SIGUSR1: it prints where every thread is and goes on running
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        assert proc.poll() is None

        # When Ctrl-C: everything stops, exit status 0.
        remaining = _ctrl_c(proc, tmp_path)
        assert proc.returncode == 0, remaining
        assert "stopped" in remaining
        assert re.search(r"most recent call first\):\n(.*\n)*.* in wait\n", remaining), remaining
        assert _processes_using(tmp_path) == []
    finally:
        _kill_all(proc, tmp_path)


def test_bridge_up_ha_rides_a_killed_primary(tmp_path: Path) -> None:
    proc, out = _start_up(tmp_path, "--ha", "--concurrency", "1", "--no-receivers", "--no-standard-ports")
    try:
        url = re.search(r"^ingress\s+(http://\S+)", out, re.M)
        kill = re.search(r"^failover:\s+kill -9 (\d+)", out, re.M)
        assert url and kill and "durability replicated" in out, out
        send = f"{url.group(1)}/v1/entities/orders/messages"
        # Given: the stack under Sentinel acknowledges replicated writes (once the replica confirms: on a
        # loaded machine its first confirmation may miss the 1 s timeout)
        first = wait_until(
            lambda: (a := httpx.post(send, json={"body": "before"}, timeout=10)).status_code == 202 and a,
            60,
            interval=0.5,
            what="the first replicated 202",
        )
        assert first.headers["x-bridge-durability"] == "replicated; replicas=1"
        # When: the primary is killed as the description says
        os.kill(int(kill.group(1)), signal.SIGKILL)

        # Then: the ingress answers 202 again, through the promoted replica, once the killed node is back
        # as its replica (`bridge up --ha` starts it again); the stack never exited
        def replicated() -> bool:
            try:
                answer = httpx.post(send, json={"body": "after"}, timeout=10)
            except httpx.HTTPError:
                return False
            return answer.status_code == 202

        wait_until(replicated, 90, interval=0.5, what="a replicated 202 after the failover")
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            _kill_all(proc, tmp_path)
    rest = proc.stdout.read() if proc.stdout else ""
    assert "starting it again as a replica" in out + rest
    assert _processes_using(tmp_path) == []


def _status(env_file: Path) -> dict[str, object]:
    """``bridge status --json`` as a user runs it: the settings file sourced into a shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    script = f'set -a; . "{env_file}"; set +a; exec "{sys.executable}" -m bridge.cli.main status --json'
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, object] = json.loads(done.stdout)
    return report


@pytest.mark.timeout(600)  # the whole stack and a Spark driver on one machine
def test_bridge_up_ledger_shows_the_live_verdict_in_status(tmp_path: Path) -> None:
    proc, out = _start_up(tmp_path, "--ledger", "--concurrency", "1", "--no-standard-ports")
    try:
        url = re.search(r"^ingress\s+(http://\S+)", out, re.M)
        env_file = re.search(r"^settings\s+(\S+)", out, re.M)
        folder = re.search(r"^ledger\s+(\S+)", out, re.M)
        assert url and env_file and folder, out
        assert Path(folder.group(1)) == tmp_path / "ledger"

        # Given the stack with its live ledger, when two messages are posted and handled
        for body in ("one", "two"):
            answer = httpx.post(
                f"{url.group(1)}/v1/entities/orders/messages", json={"body": body}, timeout=10
            )
            assert answer.status_code == 202

        # Then `bridge status` shows the ledger's verdict: both accepted and handled, nothing overdue
        def reconciled() -> dict[str, Any] | None:
            ledger = _status(Path(env_file.group(1))).get("ledger")
            if not isinstance(ledger, dict):
                return None
            orders = ledger.get("entities", {}).get("orders", {})
            return ledger if orders.get("handled") == 2 else None

        try:
            ledger = wait_until(reconciled, 300, 2, "the ledger's verdict in bridge status")
        except TimeoutError:
            raise AssertionError((tmp_path / "ledger.log").read_text()[-3000:]) from None
        assert ledger["verdict"] == "ok", ledger
        assert (ledger["entities"]["orders"]["accepted"], ledger["overdue"]) == (2, 0), ledger
        assert (tmp_path / "ledger" / "ledger.json").exists()

        # When Ctrl-C: the ledger stops with the rest
        remaining = _ctrl_c(proc, tmp_path)
        assert proc.returncode == 0, remaining
        assert _processes_using(tmp_path) == []
    finally:
        _kill_all(proc, tmp_path)
