"""``bridge serve``: the HTTP ingress (``/v1`` envelope API and the Service Bus REST door) under uvicorn.

Binding to an address other than loopback requires API keys: the command refuses to start when none are
configured (``ingress.api_keys``; ``docs/doors/http.md``, "Auth"), so an unauthenticated door is never
exposed by accident.
"""

from __future__ import annotations

from typing import Any

import typer

from bridge.cli.context import CONFIGURATION_EXIT_CODE, settings_or_exit
from bridge.errors import ConfigurationError


def register(app: typer.Typer) -> None:
    """Add ``serve``."""
    app.command(name="serve", help="Run the HTTP ingress (JSON envelope API and Service Bus REST door).")(
        serve
    )


def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind; non-loopback requires API keys."),
    port: int = typer.Option(8080, help="TCP port."),
) -> None:
    """Serve until interrupted."""
    # The HTTP app and uvicorn are imported here, not at the top: every `bridge` process imports this
    # module to register the command, and the app's import costs about a second of CPU that the emulator,
    # worker, beat and receiver processes would pay at each start for nothing.
    import uvicorn

    from bridge.http.app import create_app, is_loopback
    from bridge.http.server import uvicorn_options

    settings = settings_or_exit()
    require_auth = settings.ingress.require_api_key or not is_loopback(host)
    from bridge.observability.logs import configure_logging
    from bridge.observability.sentry import init_sentry

    configure_logging(settings, "serve")
    from bridge.observability import tracing

    tracing.configure("bridge-serve")
    try:
        app: Any = create_app(settings, require_auth=require_auth)
    except ConfigurationError as exc:
        typer.echo(f"bridge: configuration error: {exc}", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE) from None
    if init_sentry(settings, component="serve"):
        from sentry_sdk.integrations.asgi import SentryAsgiMiddleware

        app = SentryAsgiMiddleware(app)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,  # configure_logging's handler (JSON or text, secrets filtered) for uvicorn too
        log_level=settings.log_level.lower(),
        access_log=False,
        lifespan="on",
        server_header=False,
        **uvicorn_options(settings),
    )
