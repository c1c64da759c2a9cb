"""Whether one of AReaL's requests (create, scale, update, colocate, fork, delete) fits the release as its current
model shows it, refused as AReaL's schedulers refuse it; nothing is written when a check fails (pure).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..areal_types import Job, SchedulingSpec
from ..config import ReleaseOwnership
from ..errors import InvalidRequestError, WorkerCreationError, WorkerNotFoundError
from ..naming import role_problem
from . import values as job_values
from .model import ReleaseModel


@contextmanager
def as_creation_error() -> Iterator[None]:
    """A Job that cannot become chart values (values.TopologyError) as AReaL's WorkerCreationError."""
    try:
        yield
    except job_values.TopologyError as error:
        raise WorkerCreationError(error.worker_key, error.reason, error.details) from None


def spec(job: Job) -> SchedulingSpec:
    """The role's one SchedulingSpec, checked against what Kubernetes can run."""
    with as_creation_error():
        resolved = job_values.resolve_spec(job)
        job_values.check_spec(job.role, resolved)
    return resolved


def require_managed(ownership: ReleaseOwnership, release: str, operation: str) -> None:
    if ownership == "external":
        raise WorkerCreationError(
            release,
            f"{operation} is not allowed on an external release",
            f"release {release!r} is managed by someone else (helm/Argo CD): change roles in its values "
            f"there; this scheduler only discovers and calls its workers",
        )


def require_role(model: ReleaseModel, role: str) -> None:
    if role not in model.roles:
        raise WorkerNotFoundError(role)


def require_new(model: ReleaseModel, role: str) -> None:
    if model.exists(role):
        raise WorkerCreationError(
            role, "Worker group already exists", f"Use delete_workers('{role}') first to remove existing workers"
        )


def require_strategy(role: str, strategy_type: str) -> None:
    if strategy_type not in ("separation", "colocation"):
        raise InvalidRequestError(
            role,
            "Invalid strategy",
            f"scheduling_strategy.type must be 'separation' or 'colocation', got {strategy_type!r}",
        )


def require_replica_count(role: str, replicas: object) -> None:
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise WorkerCreationError(
            role,
            "Invalid configuration",
            f"replicas must be an integer greater than 0, got {replicas!r}; delete_workers('{role}') removes a role",
        )


def require_same_replicas(model: ReleaseModel, role: str, replicas: int) -> None:
    """Colocated and forked roles pin their target's replica count."""
    dependents = model.dependents(role)
    if dependents and replicas != model.replicas(role):
        raise WorkerCreationError(
            role,
            "Replica count mismatch",
            f"roles {dependents} are colocated with {role} and must keep its replica "
            f"count; delete them first, scale, then colocate them again",
        )


def require_colocation_target(model: ReleaseModel, role: str, replicas: int, target: str | None) -> str:
    """The target a colocated role lives on: a role or fork of the release, of the same replica count."""
    if not target:
        raise WorkerCreationError(role, "Invalid strategy", "Colocation strategy requires target role to be specified")
    if target not in model.roles and target not in model.forks:
        raise WorkerNotFoundError(f"Cannot colocate with role '{target}' - role not found")
    target_replicas = model.replicas(target)
    if replicas != target_replicas:
        raise WorkerCreationError(
            role,
            "Replica count mismatch",
            f"Colocated role must have same replica count as target ({replicas} != {target_replicas}); "
            f"KubernetesScheduler does not yet place a colocated role of another replica count on its target's "
            f"nodes (AReaL's AWEX colocation, areal-project/AReaL#1500): give {role} {target_replicas} replicas "
            f"(fork=True runs each in a {target} pod, sharing its GPUs) or use the separation strategy",
        )
    return target


def require_fork(model: ReleaseModel, role: str, target_role: str, replacing: bool = False) -> None:
    """A fork is a new role (or, `replacing`, an earlier controller's fork), named as a role is, of an existing
    role (not of a fork or a colocation)."""
    if target_role not in model.roles:
        raise WorkerNotFoundError(f"Target role '{target_role}' not found for fork")
    if not replacing:
        require_new(model, role)
    problem = role_problem(role)
    if problem:
        raise WorkerCreationError(role, "Invalid role name", problem)
