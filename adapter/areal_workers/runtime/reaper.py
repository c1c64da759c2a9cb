"""Releases whose trainer died: a Lease (runtime/lease.py) older than its grace period. Reaping deletes the Lease
first, on the resourceVersion it was judged by, so a trainer that renewed it in between keeps its release; then the
release is uninstalled. Only releases with a Lease are ever reaped: one installed by helm or Argo CD has none."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .lease import LEASE_LABEL


@dataclass(frozen=True)
class LeaseState:
    release: str
    name: str
    holder: str
    renewed: datetime | None
    grace_seconds: int
    resource_version: str

    def overdue_seconds(self, now: datetime) -> float:
        """Seconds past the grace period (negative: still within it)."""
        if self.renewed is None:
            return float("inf")
        return (now - self.renewed).total_seconds() - self.grace_seconds


def lease_states(leases: list[client.V1Lease]) -> list[LeaseState]:
    states = []
    for lease in leases:
        release = (lease.metadata.labels or {}).get(LEASE_LABEL)
        if not release:
            continue
        spec = lease.spec
        states.append(
            LeaseState(
                release,
                lease.metadata.name,
                spec.holder_identity or "",
                spec.renew_time or spec.acquire_time,
                int(spec.lease_duration_seconds or 0),
                lease.metadata.resource_version,
            )
        )
    return sorted(states, key=lambda state: state.release)


@dataclass(frozen=True)
class Outcome:
    lease: LeaseState
    action: str  # "alive", "reaped", "renewed meanwhile", "would reap"
    overdue_seconds: float


def reap(
    coordination: client.CoordinationV1Api,
    namespace: str,
    uninstall: Callable[[str], None],
    dry_run: bool = False,
    now: datetime | None = None,
) -> list[Outcome]:
    """Every Lease of the namespace with what was done about it; `uninstall(release)` removes a release and waits
    for its pods to go."""
    leases = coordination.list_namespaced_lease(namespace, label_selector=LEASE_LABEL).items
    now = now or datetime.now(timezone.utc)
    outcomes = []
    for state in lease_states(leases):
        overdue = state.overdue_seconds(now)
        if overdue <= 0:
            outcomes.append(Outcome(state, "alive", overdue))
            continue
        if dry_run:
            outcomes.append(Outcome(state, "would reap", overdue))
            continue
        try:
            coordination.delete_namespaced_lease(
                state.name,
                namespace,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(resource_version=state.resource_version)
                ),
            )
        except ApiException as error:
            if error.status in (404, 409):  # renewed (or reaped) since it was listed: its trainer is back
                outcomes.append(Outcome(state, "renewed meanwhile", overdue))
                continue
            raise
        uninstall(state.release)
        outcomes.append(Outcome(state, "reaped", overdue))
    return outcomes
