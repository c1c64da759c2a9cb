"""`areal-workers reap`: uninstall the releases whose trainer stopped renewing its Lease (runtime/reaper.py)."""

from __future__ import annotations

from dataclasses import asdict

from kubernetes import client

from ... import naming
from ...pods.watch import WaitTimedOut, none_left
from ...release.model import ReleaseModel
from ...runtime import reaper
from ..output import Format, console, emit, table
from ..session import EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE, CliError, Session


def reap(session: Session, dry_run: bool, timeout: float, fmt: Format) -> int:
    err = console(stderr=True)

    def uninstall(release: str) -> None:
        # A Lease only names a release: one of another chart is refused before its objects are read or removed.
        problem = session.foreign_chart(release)
        if problem is not None:
            raise CliError(
                f"cannot reap {release}: {problem}. Its expired Lease was deleted and the release left as it is "
                f"(helm uninstall {release} -n {session.namespace} removes it, if nobody needs it)",
                EXIT_USAGE,
            )
        topology = session.kube(session.inspector(release).topology, f"reading the topology of {release}")
        own = ReleaseModel(topology=topology).own_selector() or naming.release_selector(release)
        with err.status(f"uninstalling {release}: its trainer's lease expired"):
            session.helm(session.releases.uninstall(release), f"uninstalling {release}")
            try:
                session.pods().wait(own, none_left, timeout)
            except WaitTimedOut as left:
                names = ", ".join(pod.metadata.name for pod in left.pods.values())
                raise CliError(
                    f"{release} uninstalled, but pods still terminating after {timeout:.0f}s: {names}", EXIT_TIMEOUT
                ) from None

    coordination = client.CoordinationV1Api(session.api)
    outcomes = session.kube(
        reaper.reap, f"reaping in namespace {session.namespace}", coordination, session.namespace, uninstall, dry_run
    )
    if fmt != "table":
        emit(
            {
                "namespace": session.namespace,
                "leases": [
                    {**asdict(o.lease), "action": o.action, "overdue_seconds": round(o.overdue_seconds, 1)}
                    for o in outcomes
                ],
            },
            fmt,
        )
        return EXIT_OK
    if not outcomes:
        console().print(f"no trainer lease in namespace {session.namespace}")
        return EXIT_OK
    console().print(
        table(
            ["RELEASE", "HOLDER", "LAST RENEWAL", "GRACE", "STATE"],
            [
                [
                    o.lease.release,
                    o.lease.holder,
                    o.lease.renewed.isoformat(timespec="seconds") if o.lease.renewed else "-",
                    f"{o.lease.grace_seconds}s",
                    f"{o.action} ({abs(o.overdue_seconds):.0f}s "
                    f"{'past' if o.overdue_seconds > 0 else 'left of'} the grace)",
                ]
                for o in outcomes
            ],
        )
    )
    return EXIT_OK
