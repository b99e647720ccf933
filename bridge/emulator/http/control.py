"""The fault-control interface of a local namespace: JSON over plain HTTP on its own loopback port.

Routes::

    GET  /health    {"ok": true}
    GET  /status    NamespaceControl.status()
    GET  /faults    {"namespace": fault|null, "entities": {path: fault}}
    POST /faults    {"fault": "outage"|"busy"|"stall"|"blackhole"|"throttle", "entity"?, "probability"?,
                     "delay"?, "window"?}
    POST /restore   {"entity"?}     no entity = clear every fault
    POST /detach    {"entity"?}     force-detach the links of an entity (or of all entities) now
    POST /disaster  {}              drop all entities and messages

Bad input answers 400 ``{"error": "...", "field": "<name>"}`` and changes nothing. There is no
authentication: the port is meant for loopback and tests, like the emulator itself.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from bridge.emulator.control import NamespaceControl
from bridge.emulator.errors import ArgumentError
from bridge.emulator.http.server import HttpApp, HttpRequest, HttpResponse

log = logging.getLogger(__name__)

_JSON = {"Content-Type": "application/json"}
_FAULT_FIELDS = frozenset({"fault", "entity", "probability", "delay", "window"})
_RESTORE_FIELDS = frozenset({"entity"})


def make_control_app(control: NamespaceControl) -> HttpApp:
    """The control interface over ``control``; every handler is synchronous work on the loop."""

    async def app(request: HttpRequest) -> HttpResponse:
        route = (request.method, request.path.rstrip("/") or "/")
        try:
            if route == ("GET", "/health"):
                return _ok({"ok": True})
            if route == ("GET", "/status"):
                return _ok(control.status())
            if route == ("GET", "/faults"):
                return _ok(control.faults.snapshot())
            if route == ("POST", "/faults"):
                body = _body(request, _FAULT_FIELDS)
                if "fault" not in body:
                    raise ArgumentError("fault: required (outage, busy, stall, blackhole or throttle)")
                fault = control.faults.set(
                    body["fault"],
                    entity=_entity(body),
                    probability=body.get("probability"),
                    delay=body.get("delay"),
                    window=body.get("window"),
                )
                return _ok({"fault": fault.to_json(), "faults": control.faults.snapshot()})
            if route == ("POST", "/restore"):
                ended = control.faults.clear(_entity(_body(request, _RESTORE_FIELDS)))
                return _ok({"cleared": [f.to_json() for f in ended], "faults": control.faults.snapshot()})
            if route == ("POST", "/detach"):
                return _ok({"detached": control.detach(_entity(_body(request, _RESTORE_FIELDS)))})
            if route == ("POST", "/disaster"):
                _body(request, frozenset())
                log.warning("disaster requested through the control interface")
                control.disaster()
                return _ok({"ok": True})
        except ArgumentError as exc:
            field, _, reason = str(exc).partition(": ")
            return _json(400, {"error": reason or field, "field": field if reason else "body"})
        if route[1] in ("/health", "/status", "/faults", "/restore", "/detach", "/disaster"):
            return _json(405, {"error": f"method {request.method} not allowed on {route[1]}"})
        return _json(404, {"error": f"no control route {request.path[:100]!r}"})

    return app


def _body(request: HttpRequest, allowed: frozenset[str]) -> dict[str, Any]:
    """The JSON object in the body (empty body = ``{}``); unknown fields are refused, not ignored."""
    if not request.body.strip():
        return {}
    try:
        data = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        raise ArgumentError("body: not valid JSON") from None
    if not isinstance(data, dict):
        raise ArgumentError("body: must be a JSON object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ArgumentError(f"{unknown[0]}: unknown field")
    return data


def _entity(body: dict[str, Any]) -> str | None:
    entity = body.get("entity")
    if entity is not None and not isinstance(entity, str):
        raise ArgumentError("entity: must be a string or null")
    return entity


def _ok(data: dict[str, Any]) -> HttpResponse:
    return _json(200, data)


def _json(status: int, data: dict[str, Any]) -> HttpResponse:
    return HttpResponse(status, dict(_JSON), json.dumps(data).encode())
