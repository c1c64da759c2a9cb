"""Deletion: how a role, or the whole release, goes. Its workers' engines are destroyed (bounded) and its process
forks killed before its pods; with reverse_order every worker but rank 0 stops first (rank 0 owns the TCPStore); a
role's pods are waited gone before the next change.
"""

from __future__ import annotations

from .. import naming
from .driver import ReleaseDriver
from .fork_operations import ForkOperations
from .worker_calls import WorkerCalls


class Deletion:
    """The deletions of one release; the scheduler deletes a role's colocations and forks before the role."""

    def __init__(self, driver: ReleaseDriver, forks: ForkOperations, calls: WorkerCalls) -> None:
        self.driver, self.forks, self.calls = driver, forks, calls

    def delete_role(self, role: str, reverse_order: bool) -> None:
        """One helm revision without `role` (a role, a fork or a colocation nothing lives on any more)."""
        model = self.driver.model
        if role in model.colocations:
            self.driver.apply(model.without(role), f"remove colocation {role}", role)
        elif role in model.forks:
            self.calls.destroy_engines([role])
            if model.is_process_fork(role):
                self.forks.kill(role, reverse_order)
            self.driver.apply(model.without(role), f"delete fork {role}", role)
        else:
            self.calls.destroy_engines([role])
            if reverse_order:
                self.driver.scale_down_to_rank_zero(role)
            self.driver.apply(model.without(role), f"delete {role}", role)
            self.driver.cleanup.wait_gone(naming.role_selector(self.driver.name, role))
        self.driver.settle()

    def delete_release(self, reverse_order: bool) -> None:
        """Every role and fork at once: one helm uninstall, its pods waited gone."""
        model = self.driver.model
        self.calls.destroy_engines([*model.forks, *model.roles])
        for role in model.forks:
            if model.is_process_fork(role):
                self.forks.kill(role, reverse_order)
        if reverse_order:
            for role in model.roles:
                self.driver.scale_down_to_rank_zero(role)
        self.driver.uninstall()
