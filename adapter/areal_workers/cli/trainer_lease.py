"""A person's command that changes a trainer's release (`down`, `rollback`) takes the trainer's Lease first, as a
restarted trainer does (runtime/lease.py): a dead trainer's Lease is taken after it was seen unchanged for two of its
renewal intervals; a live trainer's is refused, since the trainer's next change would undo the command (it re-applies
its own values); `--force` takes it at once, and the trainer raises LeaseLostError at its next call instead. The
command renews the Lease while it works and deletes it at the end: the release is then a person's (never reaped)."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from ..errors import LeaseHeldError
from ..runtime.lease import ReleaseLease, lease_name
from .session import EXIT_USAGE, CliError, Session


def take_trainers_lease(session: Session, release: str, doing: str, force: bool) -> ReleaseLease | None:
    """The trainer's Lease of `release`, now held by this command (None: the release has none)."""
    coordination = session.leases()
    try:
        current = coordination.read_namespaced_lease(lease_name(release), session.namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    grace = float(current.spec.lease_duration_seconds or 300)
    lease = ReleaseLease(coordination, session.namespace, release, grace, takeover=force)
    try:
        lease.start()
    except LeaseHeldError as refused:
        raise CliError(
            f"cannot {doing} release {release}, its trainer is alive: {refused}\nIts next change would undo this: "
            f"stop the trainer first, or pass --force to take its Lease (the trainer then stops writing and raises "
            f"LeaseLostError at its next call)",
            EXIT_USAGE,
        ) from refused
    return lease


def give_up(lease: ReleaseLease | None) -> None:
    """After the command: the Lease is deleted, the release (if any is left) is a person's."""
    if lease is not None:
        lease.stop()
        lease.delete()
