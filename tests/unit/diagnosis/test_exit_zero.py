"""Any terminal state is a dead worker (AReaL's SlurmScheduler since areal-project/AReaL#1583, where a COMPLETED job
fails the role): a worker whose process exits 0 is reported as failed with exit code 0, in every shape its pod
takes under restartPolicy Always, never as healthy or still starting."""

from __future__ import annotations

from test_diagnosis import container_status, make_pod, ready_conditions, terminated

from areal_workers.diagnosis import diagnose_pod
from areal_workers.errors import WorkerFailedError, diagnosed_reason
from areal_workers.pods.inspector import ReleaseInspector, failure_reason
from areal_workers.pods.watch import all_ready, is_ready


def exited_zero_then_back_off():
    """The kubelet's back-off after the container exited 0 (AReaL's guard returned, e.g. a cmd that is not a server)."""
    return make_pod(
        statuses=[
            container_status(waiting=("CrashLoopBackOff", "back-off 10s"), last=terminated(0, "Completed"), restarts=2)
        ],
        conditions=ready_conditions(False),
    )


def test_a_worker_in_back_off_after_exiting_zero_failed_with_exit_code_zero():
    problem = diagnose_pod(exited_zero_then_back_off())
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code, problem.signal) == ("CrashLoopBackOff", True, 0, None)
    assert "Completed, exit code 0" in problem.message
    assert "must keep running" in problem.advice


def test_a_worker_running_again_after_exiting_zero_before_it_was_ready_failed():
    pod = make_pod(
        statuses=[container_status(running=True, last=terminated(0, "Completed"), restarts=1)],
        conditions=ready_conditions(False),
    )
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code) == ("Completed", True, 0)


def test_a_ready_worker_that_exited_zero_and_restarted_lost_its_engines():
    ready = make_pod(statuses=[container_status(running=True, ready=True)], conditions=ready_conditions(True))
    pod = make_pod(
        statuses=[container_status(running=True, last=terminated(0, "Completed"), restarts=1)],
        conditions=ready_conditions(False),
    )
    problem = diagnose_pod(pod, ready_pod=ready)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code) == ("RestartedAfterReady", True, 0)


def test_a_pod_whose_containers_all_completed_is_a_failed_worker():
    pod = make_pod(
        phase="Succeeded",
        statuses=[container_status(state_terminated=terminated(0, "Completed"))],
        conditions=ready_conditions(False),
    )
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code) == ("Completed", True, 0)


def test_a_worker_that_exited_zero_is_not_ready():
    pod = exited_zero_then_back_off()
    pod.status.pod_ip = "10.0.0.7"
    pod.metadata.labels = {"apps.kubernetes.io/pod-index": "0"}
    assert not is_ready(pod)
    assert not all_ready(1)({pod.metadata.name: pod})


class QuietCluster:
    """The two reads ReleaseInspector.failure makes for a fatal problem: no events, one log line."""

    def list_namespaced_event(self, namespace: str, **options: object):
        return type("Events", (), {"items": []})()

    def read_namespaced_pod_log(self, name: str, namespace: str, **options: object) -> str:
        return "guard: nothing to serve, exiting\n"


def test_the_scheduler_raises_arealss_worker_failed_error_with_exit_code_zero_and_the_diagnosis():
    pod = exited_zero_then_back_off()
    pod.metadata.labels = {"apps.kubernetes.io/pod-index": "0"}
    inspector = ReleaseInspector(QuietCluster(), "areal", "rel")  # type: ignore[arg-type]
    error = inspector.failure("rollout", pod, None, [])
    assert isinstance(error, WorkerFailedError)
    assert (error.worker_id, error.exit_code) == ("rollout/0", 0)
    assert "CrashLoopBackOff [fatal]" in error.stderr
    assert "guard: nothing to serve, exiting" in error.stderr
    # The verdict travels with the error as data: metrics and Events read it, never parse the text.
    assert diagnosed_reason(error) == "CrashLoopBackOff" and failure_reason(error) == "CrashLoopBackOff (rollout/0)"
