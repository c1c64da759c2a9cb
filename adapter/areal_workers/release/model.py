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

__all__ = ["ReleaseModel"]


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

    def worker_ids(self, role: str) -> list[str]:
        """A colocated role's workers are its target's."""
        owner = self.colocations.get(role, role)
        return [naming.worker_id(owner, i) for i in range(self.replicas(role))]

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
