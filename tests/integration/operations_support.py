"""Helpers of the operations tests: scraping Prometheus endpoints and driving headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import httpx
from prometheus_client import Counter
from prometheus_client.parser import text_string_to_metric_families

from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.stack import LocalStack
from bridge.observability import metrics

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


class Scrape:
    """One Prometheus text exposition, parsed: samples by name, each a list of (labels, value)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[sample.name].append((dict(sample.labels), sample.value))

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels`` (0 when none)."""
        return sum(
            v for have, v in self.samples.get(name, []) if all(have.get(k) == w for k, w in labels.items())
        )

    def names(self) -> set[str]:
        """Every sample name present."""
        return set(self.samples)


def scrape(url: str, headers: dict[str, str] | None = None) -> Scrape:
    """GET ``url`` (a ``/metrics`` endpoint) and parse it."""
    answer = httpx.get(url, headers=headers or {}, timeout=30)
    answer.raise_for_status()
    return Scrape(answer.text)


def chromium_binary() -> str | None:
    """Debian's ``chromium`` (installed by ``scripts/bootstrap``), if present."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(url: str, *, screenshot: Path | None = None, budget_ms: int = 6000) -> str:
    """Load ``url`` in headless Chromium, let its scripts run ``budget_ms`` of virtual time; the DOM.

    With ``screenshot``, a second run saves a PNG of the page there.
    """
    binary = chromium_binary()
    assert binary is not None, "chromium is not installed (scripts/bootstrap installs it)"
    with tempfile.TemporaryDirectory(prefix="bridge-chromium-") as profile:
        base = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}"]
        dom = subprocess.run(
            [*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
        ).stdout
        if screenshot is not None:
            subprocess.run(
                [*base, "--window-size=1600,900", f"--screenshot={screenshot}", url],
                capture_output=True,
                timeout=120,
                check=True,
            )
    return dom


def chromium_page(url: str, screenshot: Path, *, window: str = "1366,900", budget_ms: int = 5000) -> str:
    """Load ``url`` once in headless Chromium ``window`` wide: save a PNG of it and return its DOM, both
    after ``budget_ms`` of virtual time (one browser start instead of ``chromium``'s two)."""
    binary = chromium_binary()
    assert binary is not None, "chromium is not installed (scripts/bootstrap installs it)"
    with tempfile.TemporaryDirectory(prefix="bridge-chromium-") as profile:
        args = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}"]
        args += [f"--window-size={window}", f"--screenshot={screenshot}", "--dump-dom", url]
        return subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout


def start_serves(stack: LocalStack, *names: str, **env: str) -> list[str]:
    """``bridge serve`` processes of ``stack`` started side by side; their base URLs."""
    ports = {name: free_port() for name in names}
    procs = {
        name: stack.start_bridge(name, "serve", "--host", "127.0.0.1", "--port", str(port), **env)
        for name, port in ports.items()
    }
    for name, port in ports.items():
        assert wait_listening("127.0.0.1", port, 30), f"bridge serve did not listen: {procs[name].log_tail()}"
    return [f"http://127.0.0.1:{port}" for port in ports.values()]


def start_serve(stack: LocalStack, name: str = "serve", **env: str) -> str:
    """``bridge serve`` of ``stack`` on a free loopback port; returns its base URL."""
    port = free_port()
    proc = stack.start_bridge(name, "serve", "--host", "127.0.0.1", "--port", str(port), **env)
    assert wait_listening("127.0.0.1", port, 30), f"bridge serve did not listen: {proc.log_tail()}"
    return f"http://127.0.0.1:{port}"


def exposed_names() -> list[str]:
    """Every series name a scrape can contain (counters with their ``_total``; histogram bases)."""
    names = [m._name + ("_total" if isinstance(m, Counter) else "") for m in metrics.PROCESS_METRICS]
    names += [m.name + ("_total" if m.kind == "counter" else "") for m in metrics.STATE_METRICS]
    return names
