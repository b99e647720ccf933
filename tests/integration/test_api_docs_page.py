"""The ingress's front page and its interactive API docs, as a person sees them in headless Chromium.

The docs page must work offline: its scripts come from the ingress itself, and the machine running the tests
has no route to a CDN, so a page that needed one would render nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from bridge.http.openapi import document
from bridge.settings import Settings
from tests.integration.ingress_support import running_ingress
from tests.integration.operations_support import chromium, chromium_binary

pytestmark = pytest.mark.skipif(
    chromium_binary() is None, reason="chromium not installed (scripts/bootstrap installs it)"
)


def test_front_page_links_and_docs_render_every_route(redis_url: str, tmp_path: Path) -> None:
    with running_ingress(Settings(redis_url=redis_url)) as base:
        # Given the front page: every operator link answers
        front = chromium(f"{base}/")
        links = re.findall(r'<a href="([^"]+)">', front)
        assert links[:4] == ["/status", "/metrics", "/docs", "/v1/openapi.json"]
        for link in links:
            assert httpx.get(f"{base}{link}", timeout=10).status_code == 200, link

        # When the docs page is loaded and its scripts run
        screenshot = tmp_path / "api-docs.png"
        dom = chromium(f"{base}/docs", screenshot=screenshot, budget_ms=8000)

    # Then Swagger UI drew one block per route of the OpenAPI document, from the ingress's own assets
    drawn = set(re.findall(r'class="opblock-summary-path" data-path="([^"]+)"', dom))
    assert drawn == set(document()["paths"]), dom[:2000]
    assert "OAS 3.1" in dom
    assert screenshot.stat().st_size > 20_000
