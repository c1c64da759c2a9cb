"""Names and label selectors shared by the adapter and the chart (charts/areal-workers/templates/_helpers.tpl)."""

from __future__ import annotations

import hashlib
import re

RELEASE_NAME_MAX = 53  # helm's limit
ROLE_PATTERN = re.compile(r"^[a-z]([-_a-z0-9]*[a-z0-9])?$")
ROLE_MAX = 40

LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_ROLE = "areal.io/role"
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"


def release_name(experiment: str, trial: str) -> str:
    """One release per (experiment, trial): `aw-<experiment>-<trial>-<hash>` as a DNS-1123 label of <= 53
    characters; the hash of the raw pair keeps names distinct whatever sanitizing and truncation did."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"aw-{experiment}-{trial}".lower()).strip("-")
    # Always hashed: ("a-b", "c") and ("a", "b-c") read the same once joined.
    digest = hashlib.sha256(f"{experiment}/{trial}".encode()).hexdigest()[:8]
    return f"{slug[: RELEASE_NAME_MAX - 9].rstrip('-')}-{digest}"


def role_problem(role: str) -> str | None:
    """Why `role` cannot be a chart role key, or None when it can."""
    if not isinstance(role, str) or not role:
        return "role must be a non-empty string"
    if len(role) > ROLE_MAX:
        return f"role {role!r} is {len(role)} characters; at most {ROLE_MAX} fit Kubernetes object names"
    if not ROLE_PATTERN.match(role):
        suggestion = re.sub(r"[^a-z0-9_-]+", "-", role.lower()).strip("-_")
        suggestion = suggestion if suggestion[:1].isalpha() else f"role-{suggestion}".rstrip("-")
        return (
            f"role {role!r} must be lowercase letters, digits, '-' or '_', start with a letter and end with "
            f"a letter or digit (e.g. {suggestion[:ROLE_MAX].rstrip('-_')!r})"
        )
    return None


def release_selector(release: str) -> str:
    return f"{LABEL_INSTANCE}={release}"


def helm_test_pods_selector(release: str) -> str:
    """The release's `helm test` hook Pods (kept after a run for `helm test --logs`; helm uninstall leaves them)."""
    return f"{LABEL_INSTANCE}={release},{LABEL_COMPONENT}=test"


def role_selector(release: str, role: str) -> str:
    return f"{LABEL_INSTANCE}={release},{LABEL_ROLE}={role}"


def worker_id(role: str, index: int) -> str:
    return f"{role}/{index}"


def parse_worker_id(value: str) -> tuple[str, int] | None:
    role, sep, index = value.rpartition("/")
    if not sep or not role or not (index.isascii() and index.isdigit()):
        return None
    return role, int(index)
