"""Log set-up of the bridge's entry points: one line per record, JSON when ``log_json`` (the default).

Only entry points call ``configure_logging`` (``bridge serve``, ``worker``, ``beat``; Celery's own set-up is
replaced through its ``setup_logging`` signal); library code only uses ``logging.getLogger(__name__)``.

A JSON line holds ``ts`` (ISO-8601 UTC), ``level``, ``logger``, ``message``, ``component`` (serve, worker,
beat, ...), ``pid`` and, for an exception, ``exc``. Every line — JSON or text — passes ``SecretFilter``,
which replaces the known secret values of the settings, API keys (by digest) and the credential patterns of
``scrub_secrets`` (``bridge.observability.sentry.Scrubber``),
so a library that logs a connection string or a Redis URL cannot leak it.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from bridge.observability.sentry import Scrubber
from bridge.settings import Settings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(component)s] %(message)s"


class SecretFilter(logging.Filter):
    """Renders each record's message once and removes secrets from it (and from its traceback)."""

    def __init__(self, scrubber: Scrubber, component: str) -> None:
        super().__init__()
        self._clean = scrubber.text
        self.component = component

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self._clean(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._clean(record.exc_text)
        if not hasattr(record, "component"):
            record.component = self.component
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "component": getattr(record, "component", None),
            "pid": record.process,
        }
        if record.exc_text:
            line["exc"] = record.exc_text
        elif record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


_component = {"name": "bridge"}


def configure_logging(
    settings: Settings, component: str | None = None, *, level: str | int | None = None, stream: Any = None
) -> logging.Handler:
    """Replace the root logger's handlers with one (JSON or text) on stderr; returns it.

    ``component`` defaults to the one named before in this process; ``level`` to ``log_level``.
    """
    if component is not None:
        _component["name"] = component
    component = _component["name"]
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(SecretFilter(Scrubber(settings), component))
    handler.setFormatter(JsonFormatter() if settings.log_json else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level or settings.log_level)
    # The SDKs' per-frame and per-connection chatter is not the bridge's story.
    for noisy in ("azure", "uamqp", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    return handler
