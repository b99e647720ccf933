"""The HTML report as headless Chromium lays it out: what a person sees, measured by the browser.

The report carries no script (it must open anywhere), so a copy of it gets one probe script at its end.
Chromium loads the copy once: it saves a screenshot, and the probe — run after layout — measures every
over-time chart with the browser's own geometry (``getBoundingClientRect``, each polyline point mapped
to the page by ``getScreenCTM``, each dot's box) and writes the measurements as JSON into an element of
the page, which ``--dump-dom`` returns. The tests then judge pixels on the page, not the HTML source.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.operations_support import chromium_page

PROBE_ID = "rendered-probe"
"""The element the probe writes its JSON into (the script below names it)."""
PROBE = """
<script>
window.addEventListener("load", () => {
  const box = (el) => { const b = el.getBoundingClientRect();
    return {left: b.left, right: b.right, top: b.top, bottom: b.bottom, width: b.width, height: b.height}; };
  const shown = (el) => { const s = getComputedStyle(el);
    return s.display !== "none" && s.visibility !== "hidden" && Number(s.opacity) > 0; };
  const charts = [...document.querySelectorAll("#over-time svg.series")].map((svg) => {
    const ctm = svg.getScreenCTM();
    return {
      entity: svg.closest("[data-entity]")?.dataset.entity ?? null,
      title: svg.getAttribute("aria-label"),
      box: box(svg),
      shown: shown(svg),
      bands: [...svg.querySelectorAll("rect.band")].map((r) => ({
        kind: r.classList[1], label: r.dataset.label, box: box(r), shown: shown(r),
        start: Number(r.dataset.start), end: Number(r.dataset.end),
        fill: getComputedStyle(r).fill, opacity: Number(getComputedStyle(r).fillOpacity)})),
      lines: [...svg.querySelectorAll("polyline, path.line")].map((p) => ({
        series: p.dataset.series ?? null, shown: shown(p), length: p.getTotalLength(),
        stroke: getComputedStyle(p).stroke,
        points: p.points ? [...p.points].map((q) => { const s = q.matrixTransform(ctm); return [s.x, s.y]; })
                         : []})),
      dots: [...svg.querySelectorAll("circle.dot")].map((c) => ({
        series: c.dataset.series ?? null, shown: shown(c), box: box(c)})),
    };
  });
  const out = document.createElement("pre");
  out.id = "rendered-probe";
  out.textContent = JSON.stringify({
    charts, page_width: document.documentElement.scrollWidth, viewport: window.innerWidth,
    text: document.body.innerText});
  document.body.appendChild(out);
});
</script>
"""


@dataclass
class Rendered:
    """The measurements the probe took, and the screenshot."""

    charts: list[dict[str, Any]]
    page_width: float
    viewport: float
    text: str
    screenshot: Path

    def of(self, entity: str) -> list[dict[str, Any]]:
        """The charts of one entity."""
        return [c for c in self.charts if c["entity"] == entity]


def render_report(report: Path, workdir: Path, window: str = "1366,2600") -> Rendered:
    """Load a probed copy of ``report`` in headless Chromium ``window`` wide; its measurements."""
    page = report.read_text()
    assert "</body>" in page, "the report has no </body>"
    probed = workdir / "report-probed.html"
    probed.write_text(page.replace("</body>", PROBE + "</body>", 1))
    screenshot = workdir / "report-rendered.png"
    dom = chromium_page(probed.as_uri(), screenshot, window=window)
    found = re.search(rf'<pre id="{PROBE_ID}">(.*?)</pre>', dom, re.S)
    assert found is not None, f"the probe did not run: {dom[-2000:]}"
    data = json.loads(html.unescape(found.group(1)))
    return Rendered(data["charts"], data["page_width"], data["viewport"], data["text"], screenshot)


def inside(points: list[list[float]], band: dict[str, Any]) -> list[list[float]]:
    """The points (page pixels) whose x falls within the band's drawn x-range."""
    return [p for p in points if band["box"]["left"] <= p[0] <= band["box"]["right"]]
