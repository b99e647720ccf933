"""The documentation site as a person sees it: built with ``mkdocs build --strict``, served over HTTP, and
loaded in headless Chromium (the status page test's approach, ``operations_support.chromium``), which renders
the home page and one content page and takes a screenshot of each.

Skipped, with the reason printed, only when Chromium is missing (``scripts/bootstrap test`` installs it).
"""

from __future__ import annotations

import http.server
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operations_support import chromium, chromium_binary

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.skipif(
    chromium_binary() is None, reason="chromium not installed (scripts/bootstrap test installs it)"
)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built the way the gate builds it (strict: any warning fails)."""
    out = tmp_path_factory.mktemp("docs") / "site"
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)]
    result = subprocess.run(
        [*command, "--config-file", str(ROOT / "mkdocs.yml")],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="module")
def base_url(site: Path) -> Iterator[str]:
    """The site served on a free loopback port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG, from its IHDR chunk (which must come first)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.parametrize(
    ("page", "title", "text"),
    [
        ("index.html", "Service Bus bridge", "Start here"),
        ("paired.html", "Paired namespaces - Service Bus bridge", "The .NET defaults"),
    ],
)
def test_a_page_renders_in_chromium(base_url: str, tmp_path: Path, page: str, title: str, text: str) -> None:
    shot = tmp_path / f"{page}.png"
    dom = chromium(f"{base_url}/{page}", screenshot=shot, budget_ms=500)
    assert f"<title>{title}</title>" in dom
    assert text in dom
    assert "Paired namespaces" in dom  # the navigation is rendered on every page
    assert png_size(shot) == (1600, 900)
    # A blank page compresses to a few kB; a rendered one with text and the theme's header does not.
    assert shot.stat().st_size > 20_000, shot.stat().st_size
