"""An `events.k8s.io/v1` Event of the scheduler's, as the body the API takes (pure): what it is about (`regarding`),
its note scrubbed of credentials and cut to the API's 1 KiB, and the patch that counts a repeat as its series."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import naming
from ..reasons import Reason

REPORTING_CONTROLLER = "areal-workers"
NOTE_BYTES = 1024  # the apiserver refuses an events.k8s.io/v1 note longer than this (in UTF-8 bytes)
FIELD_CHARS = 128  # reportingInstance, action, reason
NAME_CHARS = 253
REDACTED = "[redacted]"
CUT = " [...]"

_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
# A JWT (a ServiceAccount token among them): three base64url parts, the first two JSON objects ("eyJ" is "{").
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# password=..., "token": "...", client-secret: ... (a separator right after the key: "the Secret regcred" stays)
_KEY_VALUE = re.compile(
    r"(?i)(\b(?:[\w.-]*[_.-])?(?:password|passwd|pwd|token|secret|api[_-]?key|access[_-]?key|credentials?|auth)"
    r"[\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&\"'}]+)"
)
# --password VALUE, --token=VALUE
_FLAG = re.compile(r"(?i)(--[\w-]*(?:password|passwd|token|secret|key|credentials?)[\w-]*[ =])(\S+)")
# user:password@ in a URL (a registry, a git remote)
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@")


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about. `uid` lets `kubectl describe` find it; a reference without one (an object not
    read, or not created yet) is still found by `kubectl get events --field-selector involvedObject.name=...`."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str | None = None

    def body(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "namespace": self.namespace}
        return {**ref, "uid": self.uid} if self.uid else ref


def scrub(text: str) -> str:
    """`text` without credentials: bearer and basic tokens, JWTs, the value of any password/token/secret/key
    setting, the password of a URL."""
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _JWT.sub(REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _FLAG.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    return _KEY_VALUE.sub(lambda m: f"{m.group(1)}{REDACTED}", text)


def clip_bytes(text: str, limit: int) -> str:
    """`text` in at most `limit` UTF-8 bytes, marked where it was cut (never inside a character)."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[: limit - len(CUT.encode())].decode(errors="ignore") + CUT


def note_of(text: str) -> str:
    return clip_bytes(scrub(text), NOTE_BYTES)


def micro_time(moment: datetime) -> str:
    """The API's MicroTime: RFC 3339 in UTC with microseconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_name(regarding: ObjectRef, moment: datetime) -> str:
    """As client-go names them: the object's name and the time in hex nanoseconds."""
    suffix = f".{int(moment.timestamp() * 1e9):x}"
    return regarding.name[: NAME_CHARS - len(suffix)] + suffix


def decision_labels(release: str) -> dict[str, str]:
    """The labels of every Event this adapter writes: `areal-workers events` and `status` list a release's
    decisions by them (an Event's `regarding` may be a StatefulSet a later revision deleted)."""
    return {naming.LABEL_INSTANCE: release, naming.LABEL_MANAGED_BY: REPORTING_CONTROLLER}


def event_body(
    regarding: ObjectRef,
    reason: Reason,
    action: str,
    note: str,
    instance: str,
    moment: datetime,
    release: str,
    warning: bool = False,
) -> dict[str, Any]:
    """A new Event of `release`'s (`note` is scrubbed and cut here)."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": event_name(regarding, moment),
            "namespace": regarding.namespace,
            "labels": decision_labels(release),
        },
        "eventTime": micro_time(moment),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:FIELD_CHARS],
        "action": action[:FIELD_CHARS],
        "reason": str(reason),
        "regarding": regarding.body(),
        "note": note_of(note),
        "type": "Warning" if warning else "Normal",
    }


def series_patch(count: int, moment: datetime) -> dict[str, Any]:
    """The merge patch that makes an Event stand for `count` occurrences, the last at `moment`."""
    return {"series": {"count": count, "lastObservedTime": micro_time(moment)}}


SeriesKey = tuple[str, str, str, str]


def series_key(regarding: ObjectRef, reason: Reason, note: str) -> SeriesKey:
    """What makes two Events one series: the same object, reason and (scrubbed, cut) note."""
    return (regarding.kind, regarding.name, str(reason), note_of(note))
