"""One revision of a release as an immutable object: the values it was installed with and what the chart rendered
from them (its topology ConfigMap), plus the values of the next revision for each change the scheduler makes.

A scheduler that created the release and one that adopted it build this from the same two sources (`helm get
values` and the ConfigMap), so they cannot disagree. What the chart computes (ports, replicas of forks, worker
flags) is read from the rendered topology, never re-derived here.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from .. import naming
from .client import merge_values

__all__ = ["ReleaseModel", "image_text", "role_changes", "roles_diff"]


@dataclass(frozen=True)
class ReleaseModel:
    """`values`: the release's user-supplied values (what `helm get values` returns); `topology`: the chart's
    topology.json rendered from them; `revision`: the helm revision (None: no release, or an external install helm
    has no record of, whose model is its topology alone). Never mutated: every
    change produces new values, and the next revision produces a new model."""

    values: dict[str, Any] = field(default_factory=dict)
    topology: dict[str, Any] = field(default_factory=dict)
    revision: int | None = None

    # --- what the release holds ------------------------------------------------------------------

    @property
    def installed(self) -> bool:
        """A helm revision, or (an external install helm has no record of, e.g. Argo CD's) a rendered topology."""
        return self.revision is not None or bool(self.topology)

    @property
    def roles(self) -> dict[str, dict[str, Any]]:
        return self.topology.get("roles") or {}

    @property
    def forks(self) -> dict[str, dict[str, Any]]:
        return self.topology.get("forks") or {}

    @property
    def colocations(self) -> dict[str, str]:
        return self.topology.get("colocations") or {}

    @property
    def network_policy(self) -> dict[str, Any] | None:
        """Whom the release's NetworkPolicy admits (name, controller_pods, controller_namespaces, cidrs); None when
        it renders none (or a chart too old to record it)."""
        return self.topology.get("network_policy")

    @property
    def worker_flags(self) -> tuple[str, ...] | None:
        """The name-resolve and fileroot flags the chart gave the pods (None: a chart too old to record them)."""
        flags = self.topology.get("worker_flags")
        return None if flags is None else tuple(str(flag) for flag in flags)

    @property
    def selector_labels(self) -> dict[str, str]:
        """The labels the chart selects its own objects by (app.kubernetes.io/name and /instance), as it rendered
        them ({}: no topology, or a chart too old to record them: then nothing is selected for deletion)."""
        return {str(key): str(value) for key, value in (self.topology.get("selector") or {}).items()}

    def own_selector(self, role: str | None = None) -> str | None:
        """The label selector of the chart's own objects of this release (and role); None without selector labels."""
        labels = self.selector_labels
        return naming.selector(labels, role) if labels else None

    def exists(self, role: str) -> bool:
        return role in self.roles or role in self.forks or role in self.colocations

    def is_process_fork(self, role: str) -> bool:
        fork = self.forks.get(role)
        return fork is not None and fork.get("mode", "process") == "process"

    def replicas(self, role: str) -> int:
        if role in self.roles:
            return int(self.roles[role]["replicas"])
        if role in self.forks:
            return self.replicas(self.forks[role]["target"])
        return self.replicas(self.colocations[role])

    def dependents(self, role: str) -> list[str]:
        """Colocations, then forks, that live on `role` (they go before it and pin its replica count)."""
        return sorted(r for r, target in self.colocations.items() if target == role) + sorted(
            r for r, fork in self.forks.items() if fork["target"] == role
        )

    def pod_role(self, role: str) -> str:
        """The role whose pods run `role`'s workers (a process fork lives in its target's pods)."""
        if self.is_process_fork(role):
            return self.pod_role(self.forks[role]["target"])
        return self.colocations.get(role, role)

    def kueue_queue(self, workload: str) -> str | None:
        """The Kueue LocalQueue that admits a role's or pod-mode fork's workers (None: not queued)."""
        entry = self.roles.get(workload) or self.forks.get(workload) or {}
        return entry.get("kueue_queue") or None

    def ports(self, role: str) -> list[str]:
        """The guard port and extra ports the chart gave the pods of `role` (a role or a pod-mode fork)."""
        entry = self.roles.get(role) or self.forks.get(role)
        if entry is None or "guard_port" not in entry:
            raise KeyError(role)
        return [str(port) for port in (entry["guard_port"], *entry["extra_ports"])]

    def fork_ports(self, role: str) -> list[list[str]]:
        """The ports each process fork of `role` answers on, as recorded when it was forked."""
        return [[str(port) for port in ports] for ports in self.forks[role].get("ports", [])]

    # --- comparing revisions ---------------------------------------------------------------------

    def _pod_entries(self) -> dict[str, Any]:
        """The values entries of every workload that has pods of its own (roles and pod-mode forks)."""
        entries: dict[str, Any] = {name: entry for name, entry in (self.values.get("roles") or {}).items()}
        for name, fork in (self.values.get("forks") or {}).items():
            if fork.get("mode", "process") == "pod":
                entries[name] = {"fork": fork, "target": entries.get(fork["target"])}
        return entries

    def pod_workloads(self) -> set[str]:
        """The workloads with pods of their own: roles and pod-mode forks."""
        return set(self._pod_entries())

    def changed_since(self, earlier: ReleaseModel | None) -> set[str]:
        """Workloads whose pods this revision creates or replaces relative to `earlier` (None: every one)."""
        before = earlier._pod_entries() if earlier is not None else {}
        return {name for name, entry in self._pod_entries().items() if before.get(name) != entry}

    def requeued_by(self, target: ReleaseModel, queue: str | None) -> list[str]:
        """The workloads with pods that Kueue queues (by their own queue, else by `queue`, the scheduler's) and whose
        pods `target` creates or replaces, sorted: the ones a change must re-create (ReleaseDriver.requeue)."""
        return sorted(w for w in target.changed_since(self) & self.pod_workloads() if self.kueue_queue(w) or queue)

    def fingerprint(self, role: str) -> str:
        """Changes whenever a revision may replace the pods that run `role`'s workers (its entry, its fork's or
        colocation's target entry): what was learnt about those workers is valid while it stays the same."""
        roles, forks = self.values.get("roles") or {}, self.values.get("forks") or {}
        pod_role = self.pod_role(role) if self.exists(role) else role
        fork = forks.get(role)
        target = roles.get(fork["target"]) if fork else None
        return json.dumps([roles.get(pod_role), fork, target, self.colocations.get(role)], sort_keys=True)

    def workloads(self) -> set[str]:
        return set(self.roles) | set(self.forks) | set(self.colocations)

    # --- the next revision's values --------------------------------------------------------------

    def _copy(self) -> dict[str, Any]:
        return copy.deepcopy(self.values)

    def with_role(self, role: str, entry: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
        """A role created or replaced; `base` (names, image, cluster settings of this scheduler) is refreshed."""
        values = merge_values(self.values, base) if self.values else copy.deepcopy(base)
        values.setdefault("roles", {})[role] = copy.deepcopy(entry)
        return values

    def with_replicas(self, role: str, replicas: int) -> dict[str, Any]:
        values = self._copy()
        values["roles"][role]["replicas"] = replicas
        return values

    def with_colocation(self, role: str, target: str) -> dict[str, Any]:
        values = self._copy()
        values.setdefault("colocations", {})[role] = target
        return values

    def with_fork(self, role: str, fork: dict[str, Any]) -> dict[str, Any]:
        values = self._copy()
        values.setdefault("forks", {})[role] = copy.deepcopy(fork)
        return values

    def without(self, role: str) -> dict[str, Any]:
        """The values with `role` gone (a role, fork or colocation; its dependents must be gone already)."""
        values = self._copy()
        for section in ("colocations", "forks", "roles"):
            if role in (values.get(section) or {}):
                del values[section][role]
                break
        return values


# --- what changed between two revisions, for people (history descriptions, rollback --dry-run) ---------------------

RESOURCE_NAMES = ("cpu", "memory", "gpu")


def image_text(image: Any, default: str = "(release default)") -> str:
    """The chart's {repository, tag} as a reference, or `default` when the entry names none (the release's image:
    its values files', else the chart's)."""
    if not isinstance(image, dict) or not image.get("repository"):
        return default
    tag = str(image.get("tag") or "")
    return f"{image['repository']}{'@' if tag.startswith('sha256:') else ':'}{tag}" if tag else image["repository"]


def role_changes(before: dict[str, Any], after: dict[str, Any], release_image: str = "(release default)") -> list[str]:
    """What a role's chart entry changed, for people: "replicas 1->2", "image a:1->a:2", "memory 1Gi->2Gi",
    "env X changed" (names only: values may be secrets), "command changed"; empty when nothing did. An entry without
    an image runs `release_image`."""
    changes = []
    if before.get("replicas") != after.get("replicas"):
        changes.append(f"replicas {before.get('replicas')}->{after.get('replicas')}")
    old_image, new_image = image_text(before.get("image"), release_image), image_text(after.get("image"), release_image)
    if old_image != new_image:
        changes.append(f"image {old_image}->{new_image}")
    old, new = before.get("resources") or {}, after.get("resources") or {}
    changes += [f"{name} {old.get(name)}->{new.get(name)}" for name in RESOURCE_NAMES if old.get(name) != new.get(name)]
    old_env, new_env = before.get("env") or {}, after.get("env") or {}
    env = sorted(name for name in set(old_env) | set(new_env) if old_env.get(name) != new_env.get(name))
    if env:
        changes.append(f"env {', '.join(env)} changed")
    shown = {"replicas", "image", "resources", "env"}
    changes += [
        f"{key} changed" for key in sorted((set(before) | set(after)) - shown) if before.get(key) != after.get(key)
    ]
    return changes


def roles_diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per role (and fork or colocation) that two revisions' values differ in, in name order: what
    rolling `before` to `after` does to it."""
    lines = []
    old_roles, new_roles = before.get("roles") or {}, after.get("roles") or {}
    new_default = image_text(after.get("image"))
    for role in sorted(set(old_roles) | set(new_roles)):
        if role not in new_roles:
            lines.append(f"{role}: removed ({old_roles[role].get('replicas')} worker(s))")
        elif role not in old_roles:
            image = image_text(new_roles[role].get("image"), new_default)
            lines.append(f"{role}: added, {new_roles[role].get('replicas')} worker(s), image {image}")
        else:
            old_entry = {**old_roles[role], "image": old_roles[role].get("image") or before.get("image")}
            new_entry = {**new_roles[role], "image": new_roles[role].get("image") or after.get("image")}
            if changes := role_changes(old_entry, new_entry):
                lines.append(f"{role}: {', '.join(changes)}")
    for section, kind in (("forks", "fork"), ("colocations", "colocation")):
        old, new = before.get(section) or {}, after.get(section) or {}
        for name in sorted(set(old) | set(new)):
            if name not in new:
                lines.append(f"{name}: {kind} removed")
            elif name not in old:
                lines.append(f"{name}: {kind} added")
            elif old[name] != new[name]:
                lines.append(f"{name}: {kind} changed")
    return lines
