"""Requirements that the wheels in a folder need on *some* Python 3.11 release but not on this one.

``pip wheel`` resolves for the interpreter running it: a dependency behind a marker such as
``async-timeout; python_full_version < "3.11.3"`` (from redis) is left out when the host runs 3.11.7, and an
image whose Python is Debian bookworm's 3.11.2 then fails ``pip install --no-index``. This prints every such
requirement (one per line) so that ``scripts/images wheels`` can add it; nothing is printed when the folder
is complete. Only requirements outside extras are considered: the extras the host asked for were resolved.

Usage: python docker/wheels_for_311.py WHEEL_DIR
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

# Every 3.11 patch release so far and a margin: the images run CPython 3.11 (python:3.11-slim, or
# Debian bookworm's 3.11.2 in the stand-in).
PATCH_RELEASES = range(31)


def requirements(wheel: Path) -> list[Requirement]:
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode("utf-8")
    return [
        Requirement(line.split(":", 1)[1].strip())
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def missing(wheel_dir: Path) -> list[str]:
    """Requirements needed on some 3.11.x, not satisfied by a wheel in ``wheel_dir``."""
    wheels = sorted(wheel_dir.glob("*.whl"))
    have = {canonicalize_name(parse_wheel_filename(w.name)[0]) for w in wheels}
    environments = [
        {
            **default_environment(),
            "python_full_version": f"3.11.{patch}",
            "python_version": "3.11",
            "extra": "",
        }
        for patch in PATCH_RELEASES
    ]
    found: dict[str, str] = {}
    for wheel in wheels:
        for requirement in requirements(wheel):
            name = canonicalize_name(requirement.name)
            if name in have or requirement.marker is None or "extra" in str(requirement.marker):
                continue
            if any(requirement.marker.evaluate(env) for env in environments):
                bare = Requirement(str(requirement))
                bare.marker = None
                found.setdefault(name, str(bare))
    return sorted(found.values())


if __name__ == "__main__":
    for line in missing(Path(sys.argv[1])):
        print(line)
