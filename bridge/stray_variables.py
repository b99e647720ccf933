"""``BRIDGE_*`` environment variables that name no setting: found, so a typo is reported, not ignored.

pydantic-settings reads only the variables of known fields, so a misspelled top-level name
(``BRIDGE_REDSI_URL``) would be ignored without a word; a misspelled nested name (``BRIDGE_RETRY__X``) is
refused by the nested model already. ``bridge.cli.context`` prints a warning per name; ``bridge
check-config`` fails on one.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from bridge.settings import CONFIG_ENV, Settings

OTHER_VARIABLES = frozenset(
    {
        CONFIG_ENV,
        "BRIDGE_EMULATOR_KEY",
        "BRIDGE_EMULATOR_CONTROL_URL",
        "BRIDGE_PRIMARY_CONTROL_URL",
        "BRIDGE_SECONDARY_CONTROL_URL",
        "BRIDGE_INGRESS_CA_FILE",
        "BRIDGE_DEMO_KEY",
        "BRIDGE_API_KEY",
        "BRIDGE_API_KEY_SHA256",
        "BRIDGE_TEST_CACHE",
        "BRIDGE_IMAGE",
        "BRIDGE_IMAGE_CACHE",
    }
)
"""``BRIDGE_*`` variables that are not settings: the settings file, the local Service Bus's key and control
URLs, ``bridge up``'s certificate, the compose file's and the tests' own."""


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The ``BRIDGE_*`` names in ``environ`` that name no top-level setting, each with the closest one.

    pydantic-settings reads only the variables of known fields, so a misspelled top-level name
    (``BRIDGE_REDSI_URL``) would be ignored without a word; a misspelled nested name (``BRIDGE_RETRY__X``)
    is refused by the nested model already. Names are compared upper-cased, as the settings read them.
    """
    settings = {f"BRIDGE_{name.upper()}" for name in Settings.model_fields}
    unknown: list[tuple[str, str | None]] = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("BRIDGE_") or upper in OTHER_VARIABLES:
            continue
        if upper.split("__", 1)[0] in settings:
            continue
        close = difflib.get_close_matches(upper.split("__", 1)[0], sorted(settings), n=1, cutoff=0.75)
        unknown.append((name, close[0] if close else None))
    return unknown
