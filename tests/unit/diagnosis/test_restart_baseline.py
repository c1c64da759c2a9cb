"""A worker the scheduler restarted in place (a restarted trainer reclaiming its predecessor's pods): restarts up to
the pod as the scheduler saw it running again are its own, later ones are the worker's failures."""

from __future__ import annotations

from test_diagnosis import container_status, make_pod, ready_conditions, terminated

from areal_workers.diagnosis import diagnose_pod


def restarted_by_the_scheduler(restarts: int = 1, uid: str = "uid-1"):
    """The pod as seen running again (not ready yet) after the scheduler's SIGTERM made its guard exit with 0."""
    return make_pod(
        uid=uid, statuses=[container_status(running=True, last=terminated(0, "Completed"), restarts=restarts)]
    )


def test_the_restart_the_scheduler_asked_for_is_not_a_problem() -> None:
    starting = restarted_by_the_scheduler()
    assert diagnose_pod(starting) is not None  # without the baseline, a worker that exited looks failed
    assert diagnose_pod(starting, restarted_pod=starting) is None
    ready = make_pod(
        statuses=[container_status(running=True, ready=True, last=terminated(0, "Completed"), restarts=1)],
        conditions=ready_conditions(True),
    )
    assert diagnose_pod(ready, restarted_pod=starting) is None


def test_a_crash_after_the_requested_restart_is_the_workers() -> None:
    crashed = make_pod(
        statuses=[
            container_status(waiting=("CrashLoopBackOff", "back-off 10s"), last=terminated(1, "Error"), restarts=2)
        ]
    )
    problem = diagnose_pod(crashed, restarted_pod=restarted_by_the_scheduler())
    assert problem is not None and problem.fatal and problem.exit_code == 1


def test_the_baseline_of_another_pod_is_ignored() -> None:
    replaced = restarted_by_the_scheduler(uid="uid-2")
    problem = diagnose_pod(replaced, restarted_pod=restarted_by_the_scheduler(uid="uid-1"))
    assert problem is not None and problem.fatal
