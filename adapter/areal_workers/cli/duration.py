"""Time-outs as kubectl and helm take them: a Go duration (`90s`, `15m`, `1h30m`, `500ms`), or plain seconds. The
same forms as the AREAL_K8S_* time-outs (config.parse_duration), as an argparse type; and ages as kubectl shows them."""

from __future__ import annotations

import argparse

from ..config import ConfigError, parse_duration


def seconds(text: str) -> float:
    """An argparse type: the duration `text` in seconds; anything else is a usage error naming the accepted forms."""
    try:
        return parse_duration(text, source="a time-out")
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("a time-out: ")) from None


def age_text(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
