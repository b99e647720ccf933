"""What the fault-control interface needs from a running local namespace.

The emulator server implements ``NamespaceControl``; ``bridge.emulator.http.control`` serves it as JSON over
plain HTTP on a loopback port, and ``bridge.emulator.control_client`` / ``bridge emulator-ctl`` drive it.
Keeping the contract here lets the HTTP layer be tested without starting a broker.
"""

from __future__ import annotations

from typing import Any, Protocol

from bridge.emulator.faults import FaultState


class NamespaceControl(Protocol):
    """A local namespace as the control interface sees it."""

    faults: FaultState

    def disaster(self) -> None:
        """Lose every entity and message at once (on disk too), and drop every connection."""

    def detach(self, entity: str | None = None) -> int:
        """Force-detach the links of ``entity`` (and below), or of every entity; returns how many."""

    def status(self) -> dict[str, Any]:
        """A JSON-able summary: at least ``name``, entity counts, ``connections`` and ``faults``."""
