"""The scheduler's own log lines as JSON, one object per line, for log aggregation (log_format "json",
AREAL_K8S_LOG_FORMAT=json): the `areal_workers` logger gets a handler of its own on stderr and stops handing its
records to the root logger's (AReaL's) handlers, so each line is written once. "text", the default, leaves the lines
to AReaL's logging as they are."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS = ("text", "json")
PACKAGE_LOGGER = "areal_workers"


class JsonLines(logging.Formatter):
    """A record as one JSON object: time (RFC 3339, UTC), level, logger, message, the fixed `fields` (the release
    and namespace of the scheduler that asked for it), and the traceback of a logged exception."""

    def __init__(self, fields: Mapping[str, str]) -> None:
        super().__init__()
        self.fields = dict(fields)

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, timezone.utc)
        entry: dict[str, object] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **self.fields,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class _JsonHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler this module installs, so a second scheduler replaces it instead of adding one."""


def apply(log_format: LogFormat, fields: Mapping[str, str]) -> None:
    """Sets how the package's loggers write: JSON lines with `fields`, or AReaL's own handlers ("text")."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    for handler in [h for h in logger.handlers if isinstance(h, _JsonHandler)]:
        logger.removeHandler(handler)
    if log_format == "text":
        logger.propagate = True
        return
    handler = _JsonHandler()  # stderr, as logging's default handler writes
    handler.setFormatter(JsonLines(fields))
    logger.addHandler(handler)
    logger.propagate = False
