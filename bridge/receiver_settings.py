"""The ``[receiver]`` section of the settings: the duplicate-suppression window and how copies are received.

Part of the one settings model (``bridge.settings.Settings.receiver``), kept in its own module beside the
other sections; import it from ``bridge.settings``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ReceiverSettings(BaseModel):
    """``bridge receive`` / ``Receiver``: the duplicate-suppression window and how copies are received
    (``docs/receiving.md``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        le=7 * 24 * 3600,
        description="Seconds a handled MessageId is remembered (copies within it are completed unhandled).",
    )
    max_remembered: int = Field(
        default=1_000_000_000,
        gt=0,
        description=(
            "Bound of the window (ids per entity); when full, receiving stops until ids expire. The default"
            " holds 1,446 msgs/s sustained with the 7-day window; above, at least rate * window * 8/7."
        ),
    )
    prefetch: int = Field(default=0, ge=0, le=10_000, description="The SDK's prefetch_count per receiver.")
    batch_size: int = Field(default=100, ge=1, le=5000, description="Messages asked for per receive call.")
    concurrency: int = Field(
        default=8, ge=1, le=1000, description="Handler calls at once per process (sessions per namespace)."
    )
    max_wait: float = Field(default=5.0, gt=0, description="Seconds one receive call waits for messages.")
    inflight_ttl: float = Field(
        default=30.0,
        gt=0,
        description=(
            "Seconds an in-flight mark lives unrenewed, counted only while some receiver of the entity "
            "reaches Redis (a crashed handler blocks copies that long; a Redis outage does not count)."
        ),
    )
    busy_wait: float = Field(
        default=60.0, gt=0, description="Seconds a copy waits for another copy's handler, then is abandoned."
    )
    max_delivery_count: int | None = Field(
        default=None, ge=1, description="The entity's MaxDeliveryCount; None: read it from the entity."
    )
    max_lock_renewal: float = Field(
        default=3600.0, gt=0, description="Seconds a message's lock is renewed while its handler runs."
    )
    session_idle: float = Field(
        default=1.0, gt=0, description="Seconds without a message before a session is released for the next."
    )
