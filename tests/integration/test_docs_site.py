"""The documentation site as a person sees it: built with ``mkdocs build --strict``, served over HTTP, and
loaded in headless Chromium (the status page test's approach, ``operations_support.chromium``), which renders
the home page and one content page and takes a screenshot of each.

On a 1,366-px laptop screen: every Mermaid diagram renders offline (the vendored script, no CDN) and fits its
column, and an identifier in a reference table stays on one line. Those are read from the rendered page: the
test server adds a script to the page it serves (``?measure``) that opens the theme's shadow roots, waits
for the diagrams, measures them and writes what it found into the DOM that ``--dump-dom`` prints.

Skipped, with the reason printed, only when Chromium is missing (``scripts/bootstrap test`` installs it).
"""

from __future__ import annotations

import html
import http.server
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operations_support import CHROMIUM_FLAGS, chromium, chromium_binary

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.skipif(
    chromium_binary() is None, reason="chromium not installed (scripts/bootstrap test installs it)"
)


LAPTOP_WIDTH = 1366
# Mermaid draws labels at 16 px; scaled by 0.7 they are 11 px, still read without zooming.
MIN_SCALE = 0.7
MERMAID_FENCE = re.compile(r"^```mermaid$", re.M)

# Runs first in the page: the theme draws each diagram into a closed shadow root, which no script can read;
# opened here, the diagram's SVG can be measured. Once no diagram is left to draw (or after 15 s of the
# page's virtual time), it writes one JSON object into <pre id="measured">.
MEASURE_SCRIPT = """
<script>
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) { return attach.call(this, {...init, mode: "open"}); };
function labels(svg) {
  const texts = [...svg.querySelectorAll("text, foreignObject")].map((node) => node.textContent);
  return texts.join(" ").replace(/\\s+/g, " ").trim().slice(0, 300);
}
function measure() {
  const diagrams = [...document.querySelectorAll("div.mermaid")].map((host) => {
    const svg = host.shadowRoot && host.shadowRoot.querySelector("svg");
    const column = host.parentElement.getBoundingClientRect();
    const box = svg ? svg.getBoundingClientRect() : null;
    return {
      svg: !!svg,
      shapes: svg ? svg.querySelectorAll("rect, path, polygon, circle, ellipse").length : 0,
      labels: svg ? labels(svg) : "",
      error: svg ? /syntax error|parse error/i.test(labels(svg)) : false,
      scale: box && svg.viewBox.baseVal ? box.width / svg.viewBox.baseVal.width : null,
      left: box ? box.left : null, right: box ? box.right : null, width: box ? box.width : null,
      column_left: column.left, column_right: column.right, column_width: column.width,
    };
  });
  const broken = [...document.querySelectorAll("table code")].filter((c) => c.getClientRects().length > 1);
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({
    viewport: window.innerWidth,
    page_width: document.documentElement.scrollWidth,
    diagrams: diagrams,
    undrawn: document.querySelectorAll("pre.mermaid").length,
    errors: /syntax error in text/i.test(document.body.innerText),
    table_codes: document.querySelectorAll("table code").length,
    table_codes_broken: broken.map((c) => c.textContent),
  });
  document.body.appendChild(out);
}
let tries = 0;
function poll() {
  tries += 1;
  if (document.querySelectorAll("pre.mermaid").length === 0 || tries > 150) { measure(); }
  else { setTimeout(poll, 100); }
}
window.addEventListener("load", () => setTimeout(poll, 100));
</script>
"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        """A page asked for with ``?measure`` comes with MEASURE_SCRIPT at the top of its head."""
        path, _, query = self.path.partition("?")
        if query != "measure" or not path.endswith(".html"):
            super().do_GET()
            return
        page = Path(self.translate_path(path)).read_text(encoding="utf-8")
        body = page.replace("<head>", "<head>" + MEASURE_SCRIPT, 1).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


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


def diagram_pages() -> list[tuple[str, int]]:
    """Each page with Mermaid diagrams, as its built HTML name, and how many it has."""
    pages = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        count = len(MERMAID_FENCE.findall(path.read_text()))
        if count:
            pages.append((path.relative_to(ROOT / "docs").with_suffix(".html").as_posix(), count))
    return pages


def laptop(url: str, screenshot: Path) -> dict[str, Any]:
    """``url?measure`` in headless Chromium 1,366 px wide: what MEASURE_SCRIPT found, and a screenshot."""
    binary = chromium_binary()
    assert binary is not None
    with tempfile.TemporaryDirectory(prefix="bridge-chromium-") as profile:
        base = [
            binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--virtual-time-budget=20000",
            f"--window-size={LAPTOP_WIDTH},900",
        ]
        dom = subprocess.run(
            [*base, "--dump-dom", f"{url}?measure"], capture_output=True, text=True, timeout=120, check=True
        ).stdout
        subprocess.run(
            [*base, f"--screenshot={screenshot}", url], capture_output=True, timeout=120, check=True
        )
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, "the measuring script wrote nothing: " + dom[-2000:]
    measured: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return measured


def test_the_diagram_pages_are_found() -> None:
    pages = dict(diagram_pages())
    # The send path, the deployment, the passive failover, the paired state machine and failover over time.
    assert {"index.html", "concepts.html", "replication.html", "paired.html"} <= set(pages)
    assert sum(pages.values()) >= 5


@pytest.mark.parametrize(("page", "count"), diagram_pages())
def test_every_diagram_renders_offline_and_fits_a_laptop_screen(
    base_url: str, tmp_path: Path, page: str, count: int
) -> None:
    shot = tmp_path / f"{page.replace('/', '-')}.png"
    measured = laptop(f"{base_url}/{page}", shot)
    assert png_size(shot) == (LAPTOP_WIDTH, 900)

    assert measured["viewport"] == LAPTOP_WIDTH
    assert measured["undrawn"] == 0, measured  # the theme replaces each ```mermaid block once it is drawn
    assert not measured["errors"], measured
    assert len(measured["diagrams"]) == count, measured
    for diagram in measured["diagrams"]:
        # Drawn: an SVG with shapes and the labels of the source, no error in place of the picture.
        assert diagram["svg"], diagram
        assert diagram["shapes"] >= 5, diagram
        assert len(diagram["labels"]) > 20, diagram
        assert not diagram["error"], diagram
        # Not clipped: within its column, so within the page.
        assert diagram["width"] > 100, diagram
        assert diagram["width"] <= diagram["column_width"] + 0.5, diagram
        assert diagram["left"] >= diagram["column_left"] - 0.5, diagram
        assert diagram["right"] <= diagram["column_right"] + 0.5, diagram
        # Nor shrunk past reading: a diagram wider than its column is scaled down, and its labels with it.
        assert diagram["scale"] >= MIN_SCALE, diagram
    assert measured["page_width"] <= LAPTOP_WIDTH, measured


def test_an_identifier_in_a_reference_table_stays_on_one_line(base_url: str, tmp_path: Path) -> None:
    measured = laptop(f"{base_url}/settings.html", tmp_path / "settings.png")
    # Settings has long variable names (BRIDGE_WORKERS__..., BRIDGE_PAIRED__...) in narrow columns.
    assert measured["table_codes"] > 100, measured
    assert measured["table_codes_broken"] == [], measured
