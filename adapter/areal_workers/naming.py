"""Names and label selectors shared by the adapter and the chart (charts/areal-workers/templates/_helpers.tpl), and
the checks of names that reach Kubernetes object names or the filesystem."""

from __future__ import annotations

import hashlib
import re

CHART_NAME = "areal-workers"  # charts/areal-workers/Chart.yaml: the chart whose releases this adapter may change
RELEASE_NAME_MAX = 53  # helm's limit
# DNS-1035 label: what a Service name must be, and the release name starts every object name the chart renders.
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# DNS-1123 label: a Job's name, and so the value of its pods' batch.kubernetes.io/job-name label.
DNS1123_LABEL = re.compile(r"^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ROLE_PATTERN = re.compile(r"^[a-z]([-_a-z0-9]*[a-z0-9])?$")
ROLE_MAX = 40

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_ROLE = "areal.io/role"
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"  # the Job controller's label on its pods (Kubernetes >= 1.27)


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


def release_name_problem(release: str) -> str | None:
    """Why `release` cannot name a release of the chart, or None when it can. Helm accepts more (`1abc`, `a.b`)
    than the Services the chart names after it, which would fail half-way through an install."""
    if not release:
        return "the release name is empty"
    if len(release) > RELEASE_NAME_MAX:
        return f"release name {release!r} is {len(release)} characters; helm allows at most {RELEASE_NAME_MAX}"
    if not DNS1035_LABEL.match(release):
        suggestion = re.sub(r"[^a-z0-9]+", "-", release.lower()).strip("-")
        suggestion = suggestion if suggestion[:1].isalpha() else f"aw-{suggestion}".rstrip("-")
        return (
            f"release name {release!r} must be a DNS-1035 label, as the Services named after it: lowercase letters, "
            f"digits and '-', starting with a letter and ending with a letter or digit "
            f"(e.g. {suggestion[:RELEASE_NAME_MAX].rstrip('-')!r})"
        )
    return None


def path_component_problem(what: str, value: str) -> str | None:
    """Why `value` (an experiment, trial or user name, which become directories of name_resolve's record root and
    the fileroot) cannot be one path component, or None when it can."""
    if not isinstance(value, str) or not value:
        return f"{what} must be a non-empty string"
    if value in (".", ".."):
        return f"{what} {value!r} would name a directory outside the trial's own; choose another name"
    for character, reason in (("/", "a path separator"), ("\x00", "a NUL byte")):
        if character in value:
            return f"{what} {value!r} contains {reason}, so it is not one directory name; remove it"
    return None


def selector(labels: dict[str, str], role: str | None = None) -> str:
    """A label selector of exactly `labels` (and the role): the chart's selector labels, as it rendered them."""
    terms = {**labels, **({LABEL_ROLE: role} if role is not None else {})}
    return ",".join(f"{key}={value}" for key, value in sorted(terms.items()))


def release_selector(release: str) -> str:
    return f"{LABEL_INSTANCE}={release}"


def role_selector(release: str, role: str) -> str:
    return f"{LABEL_INSTANCE}={release},{LABEL_ROLE}={role}"


def worker_id(role: str, index: int) -> str:
    return f"{role}/{index}"


def parse_worker_id(value: str) -> tuple[str, int] | None:
    role, sep, index = value.rpartition("/")
    if not sep or not role or not (index.isascii() and index.isdigit()):
        return None
    return role, int(index)
