"""Time-outs as kubectl and helm take them: a Go duration (`90s`, `15m`, `1h30m`, `500ms`), or plain seconds."""

from __future__ import annotations

import argparse
import math
import re

UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
PART = r"(\d+\.?\d*|\.\d+)(ns|us|µs|ms|s|m|h)"  # longest units first: "ms" is not "m" then "s"
FORMS = "a duration such as 90s, 15m, 1h30m or 500ms (units h, m, s, ms, us, ns), or plain seconds such as 600"


def seconds(text: str) -> float:
    """An argparse type: the duration `text` in seconds; anything else is a usage error naming the accepted forms."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        if not re.fullmatch(f"(?:{PART})+", raw):
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration: use {FORMS}") from None
        value = sum(float(number) * UNITS[unit] for number, unit in re.findall(PART, raw))
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a time-out is finite and not negative; use {FORMS}")
    return value
