"""What every ``bridge`` sub-command does before its real work: load the settings once.

A command calls ``settings_or_exit()`` first. Invalid settings never produce a traceback: the operator gets
one line on stderr naming the field (never its value, which may be a secret) and exit status 2, the same
status typer uses for a bad command line.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

import typer

from bridge.errors import BridgeError, ConfigurationError, StateStoreUnavailableError
from bridge.settings import Settings, load_settings
from bridge.stray_variables import unknown_variables

CONFIGURATION_EXIT_CODE = 2


def warn_unknown_variables() -> int:
    """One stderr line per ``BRIDGE_*`` variable that is no setting (a typo is otherwise silently ignored);
    the number of them. Only names are printed, never values."""
    unknown = unknown_variables(os.environ)
    for name, close in unknown:
        hint = f" (did you mean {close}?)" if close else ""
        typer.echo(f"bridge: warning: {name} is not a bridge setting and is ignored{hint}", err=True)
    return len(unknown)


def key_value_pairs(items: list[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` options (``--conf``, ``--price``) as a dict; a malformed one is a usage error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{what} must look like KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def settings_or_exit(*, celery: bool = False, **overrides: Any) -> Settings:
    """The validated settings, or one ``bridge: configuration error: ...`` line on stderr and exit 2;
    ``celery``: the command runs Celery, so its broker must be usable too (``Settings.celery_broker``).

    A ``BRIDGE_*`` variable that names no setting is reported on stderr first (a warning: the command runs).
    """
    warn_unknown_variables()
    try:
        settings = load_settings(**overrides)
        if celery:
            from workers.broker import celery_broker

            celery_broker(settings)
        return settings
    except ConfigurationError as exc:
        # One line, even if a reason ever spans several, so log collectors keep it as one record.
        message = " ".join(str(exc).split())
        typer.echo(f"bridge: configuration error: {message}", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE) from None


def command_failed(command: str, exc: BridgeError, settings: Settings) -> NoReturn:
    """One stderr line for a command that failed, then exit 1.

    When Redis could not do what was asked, the line says where the settings point (``host:port``, never
    the password) and what to check, since the usual cause is a server not running there or a wrong URL.
    """
    from bridge.redis.connection import redis_location

    line = f"bridge {command}: {type(exc).__name__}: {exc}"
    if isinstance(exc, StateStoreUnavailableError):
        where = redis_location(settings.redis_url.get_secret_value())
        line += f" at {where}; check that Redis runs there and that redis_url (BRIDGE_REDIS_URL) names it"
    typer.echo(line, err=True)
    raise typer.Exit(1)
