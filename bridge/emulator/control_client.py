"""A small synchronous client for a local namespace's fault-control interface (tests and ``emulator-ctl``).

``ControlClient("http://127.0.0.1:<control port>")`` — the URL is the ``control_url`` that
``bridge emulator --json`` prints. Every call returns the decoded JSON answer; a refused request or an
unreachable interface raises ``bridge.errors.EmulatorError`` carrying the server's reason and field.
"""

from __future__ import annotations

from typing import Any

import httpx

from bridge.errors import EmulatorError

DEFAULT_TIMEOUT = 5.0


class ControlClient:
    """Switch faults on a local namespace and read its status."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout

    def outage(self, entity: str | None = None) -> dict[str, Any]:
        """Close every connection and refuse new ones (or refuse one entity)."""
        return self._fault("outage", entity=entity)

    def busy(self, probability: float = 1.0, entity: str | None = None) -> dict[str, Any]:
        """Reject sends with ``com.microsoft:server-busy`` with ``probability``."""
        return self._fault("busy", entity=entity, probability=probability)

    def stall(self, delay: float | None = None, entity: str | None = None) -> dict[str, Any]:
        """Settle transfers and answer CBS only after ``delay`` seconds (``None``: never)."""
        return self._fault("stall", entity=entity, delay=delay)

    def throttle(self, window: float, probability: float = 1.0) -> dict[str, Any]:
        """Throttle as Service Bus does: a tripping request refuses every request for ``window`` seconds."""
        return self._fault("throttle", probability=probability, window=window)

    def detach(self, entity: str | None = None) -> dict[str, Any]:
        """Force-detach the links of ``entity`` (or of every entity) now; ``{"detached": n}``."""
        return self._call("POST", "/detach", {"entity": entity} if entity is not None else {})

    def blackhole(self) -> dict[str, Any]:
        """Accept TCP and never answer (see ``bridge.emulator.faults`` for the SDK hang this causes)."""
        return self._fault("blackhole")

    def restore(self, entity: str | None = None) -> dict[str, Any]:
        """Clear one entity's fault, or every fault when ``entity`` is ``None``."""
        return self._call("POST", "/restore", {"entity": entity} if entity is not None else {})

    def disaster(self) -> dict[str, Any]:
        """Drop every entity and message of the namespace."""
        return self._call("POST", "/disaster", {})

    def status(self) -> dict[str, Any]:
        """Name, entity and connection counts, active faults."""
        return self._call("GET", "/status")

    def faults(self) -> dict[str, Any]:
        """The active faults: ``{"namespace": ..., "entities": {...}}``."""
        return self._call("GET", "/faults")

    def health(self) -> bool:
        """True when the control interface answers."""
        return bool(self._call("GET", "/health").get("ok"))

    def _fault(self, kind: str, **fields: Any) -> dict[str, Any]:
        body = {"fault": kind, **{k: v for k, v in fields.items() if v is not None}}
        return self._call("POST", "/faults", body)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = httpx.request(method, self.url + path, json=body, timeout=self._timeout)
        except httpx.HTTPError as exc:
            kind = exc.__class__.__name__
            raise EmulatorError(f"control interface {self.url} unreachable: {kind}") from None
        try:
            data = response.json()
        except ValueError:
            data = {"error": response.text[:200]}
        if response.status_code != 200:
            field = f" ({data['field']})" if isinstance(data, dict) and data.get("field") else ""
            reason = data.get("error") if isinstance(data, dict) else None
            raise EmulatorError(f"control {path} refused with {response.status_code}{field}: {reason}")
        if not isinstance(data, dict):
            raise EmulatorError(f"control {path} answered something other than a JSON object")
        return data
