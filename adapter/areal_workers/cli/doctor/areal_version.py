"""Which AReaL the trainer would run with: the `areal` distribution installed in this Python, against the versions
areal-workers is tested with (docs/en/areal-integration.md#which-areal). Read from the package metadata, as AReaL's
own `areal.__version__` is (areal/version.py), without importing AReaL: its import loads torch."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from importlib import metadata

from .check import Check

NAME = "AReaL version"
# Versions a CI lane runs: the real worker server and AReaL's trainers (tools/install/versions.env AREAL_VERSION).
TESTED_AREAL = ("1.0.4",)
DOCS = "docs/en/areal-integration.md#which-areal"


def installed_areal() -> str | None:
    """The version of the `areal` distribution in this Python; "" when `areal` imports from a directory without
    package metadata (a source checkout on PYTHONPATH); None when there is no `areal` at all."""
    try:
        return metadata.version("areal")
    except metadata.PackageNotFoundError:
        return "" if importlib.util.find_spec("areal") is not None else None


def check_areal_version(find: Callable[[], str | None] = installed_areal) -> Check:
    version = find()
    tested = ", ".join(TESTED_AREAL)
    if version is None:
        return Check(
            NAME,
            "skip",
            f"AReaL is not installed in this Python ({sys.executable}); the trainer's environment is the one that "
            "matters",
            f"run doctor where the trainer runs (its image or virtualenv) to check its AReaL against {tested}",
        )
    if version == "":
        return Check(
            NAME,
            "warn",
            "AReaL imports from a source checkout without package metadata: its version is unknown",
            f"install it (pip install -e <checkout>) so its version can be read; tested: AReaL {tested} ({DOCS})",
        )
    if version in TESTED_AREAL:
        return Check(NAME, "pass", f"AReaL {version}, a tested version")
    return Check(
        NAME,
        "warn",
        f"AReaL {version} is not a version areal-workers is tested with ({tested})",
        f"use AReaL {tested}, or read what differs for AReaL {version} in {DOCS}",
    )
