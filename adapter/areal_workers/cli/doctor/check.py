"""The result of one `areal-workers doctor` check, and how its detail lists names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Status = Literal["pass", "fail", "warn", "skip"]
LISTED = 4  # names a detail lists before "+N more"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""  # what to change, unless it passed


def more(items: Sequence[object]) -> str:
    return f", +{len(items) - LISTED} more" if len(items) > LISTED else ""


def listed(names: Sequence[str]) -> str:
    """The first few names, and how many more."""
    return ", ".join(names[:LISTED]) + more(names)
