"""The ingress's front page (``/``) and its interactive API documentation (``/docs``).

``/`` links what a person opens in a browser: the status page, the Prometheus metrics, the API docs and the
OpenAPI document. ``/docs`` is Swagger UI over ``/v1/openapi.json``; its scripts and styles come from the
``swagger-ui-bundle-v2`` package and are served by the ingress itself (``/docs/assets``), so the page works
on a machine with no Internet access. Neither page holds any data: what they show comes from routes that
authenticate on their own.
"""

from __future__ import annotations

import html

import swagger_ui_bundle
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

OPENAPI_URL = "/v1/openapi.json"
ASSETS = "/docs/assets"

_LINKS = (
    ("/status", "Status page", "health summary, the last hour as charts, errors, per entity state"),
    ("/metrics", "Prometheus metrics", "the series to scrape (an API key when the ingress requires one)"),
    ("/docs", "API documentation", "every route of the HTTP API, tried from the browser"),
    (OPENAPI_URL, "OpenAPI document", "the same, machine-readable (OpenAPI 3.1)"),
    ("/readyz", "Readiness", "200 when Redis answers, else 503"),
)

_FRONT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Service Bus bridge</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font: 15px/1.5 system-ui, sans-serif; margin: 2rem auto; max-width: 44rem; padding: 0 1rem; }}
dt {{ margin-top: .8rem; font-weight: 600; }} dd {{ margin: 0; color: #444; }}
</style></head>
<body><h1>Service Bus bridge</h1>
<p>This is the bridge's HTTP ingress. Applications post messages to
<code>/v1/entities/&lt;entity&gt;/messages</code> (or the Service Bus REST form
<code>/&lt;entity&gt;/messages</code>).</p>
<dl>{links}</dl>
</body></html>
"""

_SWAGGER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Service Bus bridge API</title>
<link rel="stylesheet" href="{assets}/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="/docs/start.js"></script>
</body></html>
"""

# A separate script file, not inline: a Content-Security-Policy without 'unsafe-inline' still allows it.
_START = f"""window.ui = SwaggerUIBundle({{
  url: "{OPENAPI_URL}", dom_id: "#swagger-ui", deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis], layout: "BaseLayout"
}});
"""


def front_page_html() -> str:
    """The front page: one line per operator link."""
    items = "".join(
        f'<dt><a href="{href}">{html.escape(title)}</a></dt><dd>{html.escape(about)}</dd>'
        for href, title, about in _LINKS
    )
    return _FRONT.format(links=items)


async def front_page(request: Request) -> Response:
    """``/``: links to the status page, metrics and API docs."""
    return HTMLResponse(front_page_html())


async def docs_page(request: Request) -> Response:
    """``/docs``: Swagger UI over the OpenAPI document, from the ingress's own copy of its assets."""
    return HTMLResponse(_SWAGGER.format(assets=ASSETS))


async def docs_start(request: Request) -> Response:
    """The script that starts Swagger UI on ``/docs``."""
    return Response(_START, media_type="text/javascript")


routes = [
    Route("/", front_page, methods=["GET"]),
    Route("/docs", docs_page, methods=["GET"]),
    Route("/docs/start.js", docs_start, methods=["GET"]),
    Mount(ASSETS, app=StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="api-docs-assets"),
]
