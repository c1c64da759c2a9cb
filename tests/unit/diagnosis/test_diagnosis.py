from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from kubernetes.client import (
    CoreV1Event,
    V1Affinity,
    V1Container,
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1LocalObjectReference,
    V1Node,
    V1NodeAffinity,
    V1NodeCondition,
    V1NodeSelector,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1ObjectReference,
    V1Pod,
    V1PodCondition,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
    V1Taint,
    V1Toleration,
)

from areal_workers.diagnosis import (
    MAX_LINE_CHARS,
    MAX_RENDER_LINES,
    Problem,
    diagnose_pod,
    event_lines,
    format_quantity,
    pod_requests,
    scheduling_advice,
    signal_name,
    summarize_role,
)

NOW = datetime(2026, 3, 1, 3, 0, 0, tzinfo=UTC)
IMAGE = "ghcr.io/inclusionai/areal-runtime:v1.0.4"


# ------------------------------------------------------------------------------------------------ builders


def terminated(exit_code: int, reason: str | None = None, message: str | None = None) -> V1ContainerStateTerminated:
    return V1ContainerStateTerminated(exit_code=exit_code, reason=reason, message=message)


def container_status(
    name: str = "guard",
    *,
    waiting: tuple[str, str] | None = None,
    running: bool = False,
    state_terminated: V1ContainerStateTerminated | None = None,
    last: V1ContainerStateTerminated | None = None,
    restarts: int = 0,
    ready: bool = False,
) -> V1ContainerStatus:
    state = V1ContainerState(
        waiting=V1ContainerStateWaiting(reason=waiting[0], message=waiting[1] or None) if waiting else None,
        running=V1ContainerStateRunning(started_at=NOW) if running else None,
        terminated=state_terminated,
    )
    return V1ContainerStatus(
        name=name,
        image=IMAGE,
        image_id="",
        ready=ready,
        restart_count=restarts,
        state=state,
        last_state=V1ContainerState(terminated=last) if last else V1ContainerState(),
    )


def make_pod(
    name: str = "actor-0",
    *,
    phase: str = "Running",
    statuses: Sequence[V1ContainerStatus] = (),
    init_statuses: Sequence[V1ContainerStatus] | None = None,
    conditions: Sequence[V1PodCondition] = (),
    node: str | None = "node-a",
    limits: Mapping[str, str] | None = None,
    requests: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[V1Toleration] | None = None,
    affinity: V1Affinity | None = None,
    reason: str | None = None,
    message: str | None = None,
    deletion: datetime | None = None,
    uid: str = "uid-1",
) -> V1Pod:
    container = V1Container(
        name="guard",
        image=IMAGE,
        resources=V1ResourceRequirements(
            limits=dict(limits) if limits else None, requests=dict(requests) if requests else None
        ),
    )
    init = [V1Container(name="setup", image=IMAGE)] if init_statuses is not None else None
    return V1Pod(
        metadata=V1ObjectMeta(name=name, namespace="areal", uid=uid, deletion_timestamp=deletion),
        spec=V1PodSpec(
            containers=[container],
            init_containers=init,
            node_name=node,
            node_selector=dict(node_selector) if node_selector else None,
            tolerations=list(tolerations) if tolerations else None,
            affinity=affinity,
        ),
        status=V1PodStatus(
            phase=phase,
            reason=reason,
            message=message,
            conditions=list(conditions) or None,
            container_statuses=list(statuses) or None,
            init_container_statuses=list(init_statuses) if init_statuses is not None else None,
        ),
    )


def ready_conditions(ready: bool) -> list[V1PodCondition]:
    status = "True" if ready else "False"
    return [
        V1PodCondition(type="PodScheduled", status="True"),
        V1PodCondition(type="Ready", status=status),
        V1PodCondition(type="ContainersReady", status=status),
    ]


def unschedulable(message: str) -> list[V1PodCondition]:
    return [V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable", message=message)]


def pending_pod(message: str, **kwargs: object) -> V1Pod:
    return make_pod(phase="Pending", node=None, conditions=unschedulable(message), **kwargs)  # type: ignore[arg-type]


def make_node(
    name: str,
    *,
    cpu: str = "64",
    memory: str = "512Gi",
    gpus: int | None = 8,
    ready: str = "True",
    taints: Sequence[V1Taint] = (),
    labels: Mapping[str, str] | None = None,
    unschedulable_: bool | None = None,
) -> V1Node:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    condition = V1NodeCondition(
        type="Ready",
        status=ready,
        reason="KubeletReady" if ready == "True" else "NodeStatusUnknown",
        message="" if ready == "True" else "Kubelet stopped posting node status.",
    )
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name, **(labels or {})}),
        spec=V1NodeSpec(taints=list(taints) or None, unschedulable=unschedulable_),
        status=V1NodeStatus(allocatable=allocatable, capacity=allocatable, conditions=[condition]),
    )


def gpu_pod(name: str, gpus: int, node: str, phase: str = "Running") -> V1Pod:
    return make_pod(name, node=node, phase=phase, limits={"nvidia.com/gpu": str(gpus)}, uid=f"uid-{name}")


def make_event(
    reason: str,
    message: str,
    *,
    type_: str = "Warning",
    ago: int = 10,
    count: int = 1,
    pod: str = "actor-0",
    uid: str = "uid-1",
    kind: str = "Pod",
) -> CoreV1Event:
    when = NOW - timedelta(seconds=ago)
    return CoreV1Event(
        metadata=V1ObjectMeta(name=f"{pod}.{reason}.{ago}", namespace="areal"),
        involved_object=V1ObjectReference(kind=kind, name=pod, namespace="areal", uid=uid),
        reason=reason,
        message=message,
        type=type_,
        count=count,
        first_timestamp=when,
        last_timestamp=when,
    )


# ------------------------------------------------------------------------------------------------ healthy / progressing


def test_healthy_pod_is_not_a_problem() -> None:
    pod = make_pod(statuses=[container_status(running=True, ready=True)], conditions=ready_conditions(True))
    assert diagnose_pod(pod, was_ready=True, nodes=[make_node("node-a")]) is None


def test_container_creating_is_progressing() -> None:
    pod = make_pod(
        phase="Pending",
        statuses=[container_status(waiting=("ContainerCreating", ""))],
        conditions=ready_conditions(False),
    )
    events = [
        make_event("Scheduled", "Successfully assigned areal/actor-0 to node-a", type_="Normal", ago=30),
        make_event("Pulling", f'Pulling image "{IMAGE}"', type_="Normal", ago=20),
    ]
    assert diagnose_pod(pod, nodes=[make_node("node-a")], events=events) is None


def test_running_not_ready_without_restarts_is_progressing() -> None:
    pod = make_pod(statuses=[container_status(running=True)], conditions=ready_conditions(False))
    assert diagnose_pod(pod) is None


def test_a_failing_readiness_probe_is_named_but_not_fatal() -> None:
    pod = make_pod(statuses=[container_status(running=True)], conditions=ready_conditions(False))
    events = [make_event("Unhealthy", "Readiness probe failed: connection refused", count=3)]
    problem = diagnose_pod(pod, events=events, log_tail=["loading torch"])
    assert problem is not None and not problem.fatal and problem.reason == "ProbeFailing"
    rendered = problem.render()
    assert "Readiness probe failed: connection refused" in rendered and "GET /health" in rendered
    assert "loading torch" in rendered


def test_init_container_that_completed_is_fine() -> None:
    setup = container_status("setup", state_terminated=terminated(0, "Completed"))
    pod = make_pod(
        phase="Pending",
        init_statuses=[setup],
        statuses=[container_status(waiting=("PodInitializing", ""))],
        conditions=ready_conditions(False),
    )
    assert diagnose_pod(pod) is None


def test_pod_without_status_is_progressing() -> None:
    pod = make_pod()
    pod.status = None
    assert diagnose_pod(pod) is None


# ------------------------------------------------------------------------------------------------ images


def test_image_pull_backoff_is_fatal_and_names_the_image() -> None:
    message = f'Back-off pulling image "{IMAGE}"'
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("ImagePullBackOff", message))])
    events = [
        make_event("Failed", f'Failed to pull image "{IMAGE}": not found', ago=40, count=3),
        make_event("BackOff", message, ago=5, count=7),
    ]
    problem = diagnose_pod(pod, events=events, now=NOW)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.container, problem.exit_code) == (
        "ImagePullBackOff",
        True,
        "guard",
        None,
    )
    assert problem.message == message
    assert IMAGE in problem.advice and "image.pullSecrets" in problem.advice
    assert problem.events == (
        f'40s ago  Warning  Failed (x3)  Failed to pull image "{IMAGE}": not found',
        f"5s ago  Warning  BackOff (x7)  {message}",
    )
    assert problem.exit_code_or(1) == 1


def test_err_image_pull_is_transient_unless_the_registry_says_missing_or_denied() -> None:
    hiccup = f'failed to pull image "{IMAGE}": dial tcp 10.0.0.1:443: i/o timeout'
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("ErrImagePull", hiccup))])
    problem = diagnose_pod(pod)
    assert problem is not None and problem.reason == "ErrImagePull" and not problem.fatal
    assert "reach the registry" in problem.advice

    missing = f'rpc error: failed to resolve reference "{IMAGE}": {IMAGE}: not found'
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("ErrImagePull", missing))])
    problem = diagnose_pod(pod)
    assert problem is not None and problem.fatal
    assert "does not exist" in problem.advice and "image.tag" in problem.advice

    denied = f'failed to authorize: failed to fetch anonymous token: 401 Unauthorized for "{IMAGE}"'
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("ErrImagePull", denied))])
    problem = diagnose_pod(pod)
    assert problem is not None and problem.fatal and "credentials" in problem.advice
    assert "no image pull Secret" in problem.advice and "--docker-server=ghcr.io" in problem.advice
    pod.spec.image_pull_secrets = [V1LocalObjectReference(name="ghcr-login")]
    problem = diagnose_pod(pod)
    assert problem is not None and "with the login of image pull Secret(s) ghcr-login" in problem.advice


def test_a_refused_first_pull_before_the_kubelet_read_the_pull_secret_is_not_final() -> None:
    denied = f'failed to resolve reference "{IMAGE}": pulling from host ghcr.io failed: 401 Unauthorized'
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("ErrImagePull", denied))])
    unread = make_event(
        "FailedToRetrieveImagePullSecret",
        "Unable to retrieve some image pull secrets (registry-login); attempting to pull the image may not succeed.",
    )
    once = make_event("Failed", f'Failed to pull image "{IMAGE}": {denied}')
    problem = diagnose_pod(pod, events=[unread, once], now=NOW)
    assert problem is not None and not problem.fatal and "retries with the Secret" in problem.advice

    twice = make_event("Failed", f'Failed to pull image "{IMAGE}": {denied}', count=2)
    problem = diagnose_pod(pod, events=[unread, twice], now=NOW)
    assert problem is not None and problem.fatal  # the retry had the Secret and was refused too
    assert diagnose_pod(pod, events=[once], now=NOW).fatal  # the kubelet had the Secret: refused for real

    missing = f'failed to resolve reference "{IMAGE}": {IMAGE}: not found'
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("ErrImagePull", missing))])
    assert diagnose_pod(pod, events=[unread, once], now=NOW).fatal  # a missing tag stays missing


def test_invalid_image_name_is_fatal() -> None:
    message = 'Failed to apply default image tag "GHCR.io/Areal:latest": couldn\'t parse image name'
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("InvalidImageName", message))])
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.fatal) == ("InvalidImageName", True)
    assert "not a valid image reference" in problem.advice and "image.repository" in problem.advice


# ------------------------------------------------------------------------------------------------ crashes


def test_an_unknown_waiting_reason_names_the_pod_with_its_namespace_for_kubectl() -> None:
    pod = make_pod(statuses=[container_status(waiting=("SomethingNew", "odd"))], conditions=ready_conditions(False))
    problem = diagnose_pod(pod)
    assert problem is not None and problem.reason == "SomethingNew" and not problem.fatal
    assert problem.advice.endswith("`kubectl describe pod -n areal actor-0`")


def test_crash_loop_reports_last_exit_code_and_logs() -> None:
    waiting = "back-off 40s restarting failed container=guard pod=actor-0_areal(uid-1)"
    pod = make_pod(
        statuses=[container_status(waiting=("CrashLoopBackOff", waiting), last=terminated(1, "Error"), restarts=3)],
        conditions=ready_conditions(False),
    )
    logs = ["Traceback (most recent call last):", '  File "rpc_server.py", line 10', "ValueError: bad port\n"]
    problem = diagnose_pod(pod, log_tail=logs)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code, problem.signal) == ("CrashLoopBackOff", True, 1, None)
    assert waiting in problem.message and "exit code 1" in problem.message
    assert "kubectl logs -n areal actor-0 -c guard --previous" in problem.advice  # its namespace named
    assert problem.log_tail == (
        "Traceback (most recent call last):",
        '  File "rpc_server.py", line 10',
        "ValueError: bad port",
    )
    rendered = problem.render()
    assert "ValueError: bad port" in rendered and "exit code: 1" in rendered
    assert problem.exit_code_or(-1) == 1


def test_oom_killed_in_last_state_is_fatal_with_sigkill() -> None:
    pod = make_pod(
        statuses=[container_status(running=True, last=terminated(137, "OOMKilled"), restarts=1)],
        limits={"memory": "32Gi", "cpu": "8"},
        conditions=ready_conditions(False),
    )
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code, problem.signal) == ("OOMKilled", True, 137, "SIGKILL")
    assert "memory limit 32Gi" in problem.advice and "resources.memory" in problem.advice
    assert "exit code: 137 (SIGKILL)" in problem.render()


def test_crash_loop_after_oom_is_reported_as_oom() -> None:
    pod = make_pod(
        statuses=[
            container_status(
                waiting=("CrashLoopBackOff", "back-off 5m0s"), last=terminated(137, "OOMKilled"), restarts=6
            )
        ]
    )
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.exit_code, problem.signal, problem.fatal) == ("OOMKilled", 137, "SIGKILL", True)
    assert "no memory limit" in problem.advice


def test_sigsegv_terminated_now() -> None:
    pod = make_pod(statuses=[container_status(state_terminated=terminated(139, "Error"))])
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code, problem.signal) == ("Error", True, 139, "SIGSEGV")
    assert "segmentation fault" in problem.advice


def test_sigsegv_in_last_state_before_ready_is_fatal() -> None:
    pod = make_pod(statuses=[container_status(running=True, last=terminated(139, "Error"), restarts=1)])
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code, problem.signal) == ("Error", True, 139, "SIGSEGV")
    assert "restarted (1 restarts)" in problem.message


def test_restart_lost_to_the_runtime_before_ready_is_not_fatal() -> None:
    pod = make_pod(statuses=[container_status(running=True, last=terminated(255, "Unknown"), restarts=1)])
    problem = diagnose_pod(pod)
    assert problem is not None and problem.reason == "Unknown" and not problem.fatal


def test_crash_the_container_recovered_from_before_readiness_is_history() -> None:
    pod = make_pod(
        statuses=[container_status(running=True, ready=True, last=terminated(1, "Error"), restarts=1)],
        conditions=ready_conditions(True),
    )
    assert diagnose_pod(pod) is None


def test_worker_that_exited_zero_is_fatal() -> None:
    pod = make_pod(statuses=[container_status(state_terminated=terminated(0, "Completed"))])
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code) == ("Completed", True, 0)
    assert "must keep running" in problem.advice


def test_sigterm_and_command_not_found_advice() -> None:
    pod = make_pod(statuses=[container_status(state_terminated=terminated(143, "Error"))])
    problem = diagnose_pod(pod)
    assert problem is not None and problem.signal == "SIGTERM" and "SIGTERM" in problem.advice
    pod = make_pod(statuses=[container_status(state_terminated=terminated(127, "Error"))])
    problem = diagnose_pod(pod)
    assert problem is not None and problem.signal is None and "command not found" in problem.advice


def test_init_container_crash_loop_is_fatal() -> None:
    pod = make_pod(
        phase="Pending",
        init_statuses=[
            container_status(
                "setup", waiting=("CrashLoopBackOff", "back-off 10s"), last=terminated(2, "Error"), restarts=2
            )
        ],
        statuses=[container_status(waiting=("PodInitializing", ""))],
    )
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.container, problem.reason, problem.fatal, problem.exit_code) == (
        "setup",
        "CrashLoopBackOff",
        True,
        2,
    )


def test_create_container_config_error_names_the_missing_secret() -> None:
    message = 'secret "hf-token" not found'
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("CreateContainerConfigError", message))])
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.message) == ("CreateContainerConfigError", True, message)
    assert "secret hf-token does not exist in namespace areal" in problem.advice
    assert "kubectl -n areal create secret generic hf-token" in problem.advice


def test_create_container_config_error_missing_key_and_run_as_non_root() -> None:
    message = "couldn't find key token in Secret areal/hf"
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("CreateContainerConfigError", message))])
    problem = diagnose_pod(pod)
    assert problem is not None and "Secret hf has no key token" in problem.advice
    message = "container has runAsNonRoot and image will run as root (pod: actor-0, container: guard)"
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("CreateContainerConfigError", message))])
    problem = diagnose_pod(pod)
    assert problem is not None and problem.fatal and "runAsUser" in problem.advice


# ------------------------------------------------------------------------------------------------ restarts after ready


def test_restart_after_ready_loses_engines() -> None:
    pod = make_pod(
        statuses=[container_status(running=True, ready=True, last=terminated(1, "Error"), restarts=1)],
        conditions=ready_conditions(True),
    )
    problem = diagnose_pod(pod, was_ready=True)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code) == ("RestartedAfterReady", True, 1)
    assert "engines are gone" in problem.advice


def test_restart_after_ready_without_last_state() -> None:
    pod = make_pod(statuses=[container_status(running=True, restarts=2)], conditions=ready_conditions(False))
    problem = diagnose_pod(pod, was_ready=True)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.exit_code) == ("RestartedAfterReady", True, None)
    assert problem.exit_code_or(255) == 255


def test_oom_after_ready_keeps_the_oom_reason_and_mentions_engines() -> None:
    pod = make_pod(statuses=[container_status(running=True, last=terminated(137, "OOMKilled"), restarts=1)])
    problem = diagnose_pod(pod, was_ready=True)
    assert problem is not None and problem.reason == "OOMKilled" and "engines are gone" in problem.advice


def test_ready_pod_baseline_ignores_restarts_before_readiness() -> None:
    seen_ready = make_pod(statuses=[container_status(running=True, ready=True, last=terminated(1), restarts=1)])
    same = make_pod(
        statuses=[container_status(running=True, ready=True, last=terminated(1), restarts=1)],
        conditions=ready_conditions(True),
    )
    assert diagnose_pod(same, ready_pod=seen_ready) is None
    again = make_pod(statuses=[container_status(running=True, last=terminated(1, "Error"), restarts=2)])
    problem = diagnose_pod(again, ready_pod=seen_ready)
    assert problem is not None and problem.reason == "RestartedAfterReady" and problem.fatal


def test_replaced_pod_after_ready_is_a_restart() -> None:
    seen_ready = make_pod(uid="uid-old", statuses=[container_status(running=True, ready=True)])
    fresh = make_pod(uid="uid-new", phase="Pending", statuses=[container_status(waiting=("ContainerCreating", ""))])
    problem = diagnose_pod(fresh, ready_pod=seen_ready)
    assert problem is not None
    assert (problem.reason, problem.fatal) == ("RestartedAfterReady", True)
    assert "uid-old -> uid-new" in problem.message


# ------------------------------------------------------------------------------------------------ pod failures


def test_evicted_pod_is_fatal() -> None:
    message = (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 60Mi. "
        "Container guard was using 30Gi, request is 4Gi, has larger consumption of memory."
    )
    pod = make_pod(
        phase="Failed",
        reason="Evicted",
        message=message,
        statuses=[container_status(state_terminated=terminated(137, "ContainerStatusUnknown"))],
    )
    problem = diagnose_pod(pod)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.message) == ("Evicted", True, message)
    assert "low on memory" in problem.advice and "resources.memory" in problem.advice


def test_evicted_for_disk() -> None:
    pod = make_pod(
        phase="Failed",
        reason="Evicted",
        message="The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi",
    )
    problem = diagnose_pod(pod)
    assert problem is not None and "out of disk" in problem.advice


def test_preempted_by_scheduler() -> None:
    condition = V1PodCondition(
        type="DisruptionTarget",
        status="True",
        reason="PreemptionByScheduler",
        message="kube-scheduler: preempting to accommodate a higher priority pod",
    )
    pod = make_pod(
        statuses=[container_status(running=True, ready=True)],
        conditions=[*ready_conditions(True), condition],
        deletion=NOW,
    )
    problem = diagnose_pod(pod, was_ready=True)
    assert problem is not None
    assert (problem.reason, problem.fatal) == ("Preempted", True)
    assert "higher priority" in problem.message and "priorityClassName" in problem.advice


def test_preempted_by_kubelet_for_a_critical_pod() -> None:
    pod = make_pod(phase="Failed", reason="Preempting", message="Preempted in order to admit critical pod")
    problem = diagnose_pod(pod)
    assert problem is not None and (problem.reason, problem.fatal) == ("Preempted", True)


def test_deadline_exceeded_and_out_of_gpu() -> None:
    problem = diagnose_pod(make_pod(phase="Failed", reason="DeadlineExceeded", message="Pod was active too long"))
    assert problem is not None and problem.fatal and "activeDeadlineSeconds" in problem.advice
    problem = diagnose_pod(
        make_pod(
            phase="Failed", reason="OutOfnvidia.com/gpu", message="Node didn't have enough resource: nvidia.com/gpu"
        )
    )
    assert problem is not None and problem.reason == "OutOfnvidia.com/gpu" and problem.fatal


def test_failed_phase_without_reason_uses_the_container_exit_code() -> None:
    pod = make_pod(phase="Failed", statuses=[container_status(state_terminated=terminated(3, "Error"))])
    problem = diagnose_pod(pod)
    assert problem is not None and (problem.reason, problem.exit_code) == ("Error", 3)


def test_deletion_is_fatal_only_for_a_ready_worker() -> None:
    pod = make_pod(statuses=[container_status(waiting=("ImagePullBackOff", "Back-off"))], deletion=NOW)
    problem = diagnose_pod(pod)
    assert problem is not None and problem.reason == "Terminating" and not problem.fatal
    pod = make_pod(statuses=[container_status(running=True, ready=True)], deletion=NOW)
    problem = diagnose_pod(pod, was_ready=True)
    assert problem is not None and problem.reason == "Terminating" and problem.fatal


# ------------------------------------------------------------------------------------------------ nodes


def test_node_not_ready() -> None:
    pod = make_pod(statuses=[container_status(running=True, ready=True)], conditions=ready_conditions(True))
    problem = diagnose_pod(pod, was_ready=True, nodes=[make_node("node-a", ready="Unknown"), make_node("node-b")])
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.node) == ("NodeNotReady", True, "node-a")
    assert "Ready=Unknown" in problem.message and "NodeStatusUnknown" in problem.message
    assert "kubectl describe node node-a" in problem.advice


def test_node_gone() -> None:
    pod = make_pod(statuses=[container_status(running=True, ready=True)], conditions=ready_conditions(True))
    problem = diagnose_pod(pod, was_ready=True, nodes=[make_node("node-b")])
    assert problem is not None
    assert (problem.reason, problem.fatal) == ("NodeGone", True)
    assert "node-a no longer exists" in problem.message


def test_node_deletion_by_pod_gc_and_taint_manager() -> None:
    for condition_reason, reason in (("DeletionByPodGC", "NodeGone"), ("DeletionByTaintManager", "NodeNotReady")):
        condition = V1PodCondition(type="DisruptionTarget", status="True", reason=condition_reason, message="x")
        pod = make_pod(statuses=[container_status(running=True)], conditions=[condition], deletion=NOW)
        problem = diagnose_pod(pod)
        assert problem is not None and (problem.reason, problem.fatal) == (reason, True)


def test_node_checks_are_skipped_without_nodes() -> None:
    pod = make_pod(statuses=[container_status(running=True, ready=True)], conditions=ready_conditions(True))
    assert diagnose_pod(pod, was_ready=True) is None


# ------------------------------------------------------------------------------------------------ volumes


def test_missing_secret_volume_keeps_the_pod_creating() -> None:
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("ContainerCreating", ""))])
    events = [
        make_event("Scheduled", "Successfully assigned", type_="Normal", ago=60),
        make_event(
            "FailedMount", 'MountVolume.SetUp failed for volume "ckpt" : secret "s3-creds" not found', ago=5, count=4
        ),
    ]
    problem = diagnose_pod(pod, events=events)
    assert problem is not None
    assert (problem.reason, problem.fatal) == ("FailedMount", True)
    assert "secret s3-creds does not exist in namespace areal" in problem.advice


def test_mount_that_later_succeeded_is_history() -> None:
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("ContainerCreating", ""))])
    events = [
        make_event("FailedMount", 'secret "s3-creds" not found', ago=60),
        make_event("Pulling", f'Pulling image "{IMAGE}"', type_="Normal", ago=5),
    ]
    assert diagnose_pod(pod, events=events) is None


def test_events_of_an_earlier_pod_with_the_same_name_are_ignored() -> None:
    pod = make_pod(phase="Pending", statuses=[container_status(waiting=("ContainerCreating", ""))], uid="uid-2")
    events = [
        make_event("FailedMount", 'secret "s3-creds" not found', uid="uid-1"),
        make_event("FailedMount", 'secret "s3-creds" not found', pod="actor-1", uid="uid-9"),
    ]
    assert diagnose_pod(pod, events=events) is None


# ------------------------------------------------------------------------------------------------ scheduling


GPU_MESSAGE = (
    "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
    "2 No preemption victims found for incoming pod."
)


def gpu_cluster() -> tuple[list[V1Node], dict[str, list[V1Pod]]]:
    nodes = [make_node("node-a"), make_node("node-b")]
    pods_by_node = {
        "node-a": [gpu_pod("rollout-0", 4, "node-a"), gpu_pod("rollout-1", 2, "node-a")],
        "node-b": [gpu_pod("ref-0", 4, "node-b"), gpu_pod("old-job", 4, "node-b", phase="Succeeded")],
    }
    return nodes, pods_by_node


def test_insufficient_gpu_computes_the_largest_free_across_nodes() -> None:
    nodes, pods_by_node = gpu_cluster()
    pod = pending_pod(GPU_MESSAGE, limits={"nvidia.com/gpu": "8", "cpu": "16", "memory": "128Gi"})
    events = [make_event("FailedScheduling", GPU_MESSAGE, count=12)]
    problem = diagnose_pod(pod, nodes=nodes, events=events, pods_by_node=pods_by_node, now=NOW)
    assert problem is not None
    assert (problem.reason, problem.fatal, problem.message) == ("Unschedulable", False, GPU_MESSAGE)
    assert (
        "needs 8 nvidia.com/gpu per pod; the largest free on any node is 4 (node node-b): wait for running pods "
        "to finish, lower resources.gpu or add nodes"
    ) in problem.advice
    assert "(x12)" in problem.events[0]
    assert scheduling_advice(pod, GPU_MESSAGE, nodes, pods_by_node) == problem.advice


def test_insufficient_gpu_without_pod_usage_names_the_nodes() -> None:
    nodes, _ = gpu_cluster()
    pod = pending_pod(GPU_MESSAGE, limits={"nvidia.com/gpu": "8"})
    advice = scheduling_advice(pod, GPU_MESSAGE, nodes)
    assert "nodes node-a, node-b have the allocatable for it but other pods use it" in advice


def test_never_fitting_cpu_is_fatal() -> None:
    message = "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption."
    pod = pending_pod(message, requests={"cpu": "600", "memory": "1Gi"})
    nodes = [make_node("node-a", cpu="64"), make_node("node-b", cpu="32000m")]
    problem = diagnose_pod(pod, nodes=nodes, pods_by_node={})
    assert problem is not None
    assert (problem.reason, problem.fatal) == ("Unschedulable", True)
    assert (
        "needs 600 cpu per pod; no node has more than 64 allocatable (node node-a): lower resources.cpu"
        in problem.advice
    )


def test_needs_that_fit_no_single_node() -> None:
    message = "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu."
    pod = pending_pod(message, limits={"cpu": "100", "nvidia.com/gpu": "8"})
    nodes = [make_node("cpu-node", cpu="200", gpus=0), make_node("gpu-node", cpu="50", gpus=8)]
    problem = diagnose_pod(pod, nodes=nodes)
    assert problem is not None and problem.fatal
    assert "no node has all of them allocatable" in problem.advice


def test_untolerated_taint_is_fatal() -> None:
    message = "0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: inference}."
    taint = V1Taint(key="dedicated", value="inference", effect="NoSchedule")
    nodes = [make_node("node-a", taints=[taint]), make_node("node-b", taints=[taint])]
    pod = pending_pod(message, limits={"nvidia.com/gpu": "1"})
    problem = diagnose_pod(pod, nodes=nodes)
    assert problem is not None
    assert (problem.reason, problem.fatal) == ("Unschedulable", True)
    assert "add tolerations for dedicated=inference:NoSchedule or choose other nodes" in problem.advice


def test_tolerated_taint_is_no_obstacle() -> None:
    taint = V1Taint(key="dedicated", value="inference", effect="NoSchedule")
    nodes = [make_node("node-a", taints=[taint])]
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    pod = pending_pod(
        message,
        limits={"nvidia.com/gpu": "4"},
        tolerations=[V1Toleration(key="dedicated", operator="Equal", value="inference", effect="NoSchedule")],
    )
    problem = diagnose_pod(pod, nodes=nodes, pods_by_node={"node-a": [gpu_pod("other", 6, "node-a")]})
    assert problem is not None and not problem.fatal
    assert "the largest free on any node is 2 (node node-a)" in problem.advice


def test_gpu_not_offered_by_any_node() -> None:
    message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    nodes = [make_node("node-a", gpus=None), make_node("node-b", gpus=0)]
    pod = pending_pod(message, limits={"nvidia.com/gpu": "1"})
    problem = diagnose_pod(pod, nodes=nodes)
    assert problem is not None and problem.fatal
    assert (
        "nvidia.com/gpu is not offered by any node: is the device plugin installed? or set resources.gpu 0"
        in problem.advice
    )


def test_gpu_only_on_tainted_nodes() -> None:
    message = (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )
    taint = V1Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
    nodes = [make_node("cpu-node", gpus=None), make_node("gpu-node", taints=[taint])]
    pod = pending_pod(message, limits={"nvidia.com/gpu": "1"})
    problem = diagnose_pod(pod, nodes=nodes)
    assert problem is not None and problem.fatal
    assert "only offered by nodes the pod cannot use (gpu-node)" in problem.advice
    assert "add tolerations for nvidia.com/gpu=present:NoSchedule" in problem.advice


def test_node_selector_mismatch_names_the_selector() -> None:
    message = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    nodes = [make_node("node-a", labels={"gpu-type": "a100"}), make_node("node-b", labels={"gpu-type": "a100"})]
    pod = pending_pod(message, node_selector={"gpu-type": "h100"})
    problem = diagnose_pod(pod, nodes=nodes)
    assert problem is not None
    assert (problem.reason, problem.fatal) == ("Unschedulable", True)
    assert "nodeSelector gpu-type=h100 (nodes have gpu-type: a100) matches no node" in problem.advice


def test_required_node_affinity_mismatch() -> None:
    message = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    requirement = V1NodeSelectorRequirement(key="zone", operator="In", values=["us-east-1a"])
    affinity = V1Affinity(
        node_affinity=V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=V1NodeSelector(
                node_selector_terms=[V1NodeSelectorTerm(match_expressions=[requirement])]
            )
        )
    )
    pod = pending_pod(message, affinity=affinity)
    problem = diagnose_pod(pod, nodes=[make_node("node-a", labels={"zone": "us-east-1b"})])
    assert problem is not None and problem.fatal
    assert "required node affinity (zone In ['us-east-1a'])" in problem.advice
    assert (
        diagnose_pod(
            pending_pod(message, affinity=affinity), nodes=[make_node("node-a", labels={"zone": "us-east-1a"})]
        ).fatal
        is False
    )


def test_cordoned_and_not_ready_nodes_are_transient() -> None:
    message = (
        "0/2 nodes are available: 1 node(s) were unschedulable, "
        "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."
    )
    nodes = [make_node("node-a", unschedulable_=True), make_node("node-b", ready="False")]
    pod = pending_pod(message, limits={"nvidia.com/gpu": "8"})
    problem = diagnose_pod(pod, nodes=nodes, pods_by_node={})
    assert problem is not None and not problem.fatal
    assert "node-a (cordoned)" in problem.advice and "node-b (NotReady" in problem.advice


def test_message_only_verdicts() -> None:
    selector = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    pod = pending_pod(selector, node_selector={"pool": "h100"})
    problem = diagnose_pod(pod)
    assert problem is not None and problem.fatal
    assert "nodeSelector pool=h100 matches none of 3 node(s)" in problem.advice

    mixed = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: infer}."
    pod = pending_pod(mixed, requests={"cpu": "500m"})
    problem = diagnose_pod(pod)
    assert problem is not None and not problem.fatal
    assert "needs 500m cpu per pod; 1 node(s) lack free cpu" in problem.advice
    assert "add tolerations for dedicated=infer or choose other nodes" in problem.advice

    transient = "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."
    problem = diagnose_pod(pending_pod(transient))
    assert problem is not None and not problem.fatal and "not-ready" in problem.advice


def test_autoscaler_scale_up_makes_a_never_fit_transient() -> None:
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    pod = pending_pod(message, limits={"nvidia.com/gpu": "16"})
    scale_up = make_event("TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 1->2 (max: 4)}]", type_="Normal")
    problem = diagnose_pod(pod, nodes=[make_node("node-a")], events=[scale_up])
    assert problem is not None and not problem.fatal and "cluster-autoscaler is adding a node" in problem.advice


def test_ports_and_anti_affinity_come_from_the_message() -> None:
    message = "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."
    pod = pending_pod(message, limits={"nvidia.com/gpu": "1"})
    problem = diagnose_pod(pod, nodes=[make_node("node-a"), make_node("node-b")], pods_by_node={})
    assert problem is not None and not problem.fatal and "guardPort" in problem.advice


def test_scheduling_gated_is_waiting() -> None:
    condition = V1PodCondition(
        type="PodScheduled",
        status="False",
        reason="SchedulingGated",
        message="Scheduling is blocked due to non-empty scheduling gates",
    )
    pod = make_pod(phase="Pending", node=None, conditions=[condition])
    problem = diagnose_pod(pod)
    assert problem is not None and (problem.reason, problem.fatal) == ("SchedulingGated", False)


def test_failed_scheduling_event_is_used_when_the_condition_has_no_message() -> None:
    condition = V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable")
    pod = make_pod(phase="Pending", node=None, conditions=[condition], limits={"nvidia.com/gpu": "8"})
    problem = diagnose_pod(pod, events=[make_event("FailedScheduling", GPU_MESSAGE)])
    assert problem is not None and problem.message == GPU_MESSAGE
    assert "needs 8 nvidia.com/gpu per pod; 2 node(s) lack free nvidia.com/gpu" in problem.advice


# ------------------------------------------------------------------------------------------------ quantities


def test_pod_requests_add_quantities_of_any_unit_in_base_units() -> None:
    pod = make_pod(requests={"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2e9"})
    pod.spec.overhead = {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1.5G"}
    requests = pod_requests(pod)
    assert requests == {"cpu": Decimal("1.5"), "memory": Decimal(1536 * 2**20), "ephemeral-storage": Decimal("3.5e9")}
    assert {name: format_quantity(name, value) for name, value in requests.items()} == {
        "cpu": "1500m",
        "memory": "1.5Gi",
        "ephemeral-storage": "3.3Gi",
    }


def test_pod_requests_default_to_limits_and_take_the_largest_init_container() -> None:
    pod = make_pod(limits={"nvidia.com/gpu": "8", "cpu": "16"}, requests={"cpu": "4"})
    pod.spec.init_containers = [V1Container(name="setup", resources=V1ResourceRequirements(requests={"cpu": "10"}))]
    assert pod_requests(pod) == {"nvidia.com/gpu": Decimal(8), "cpu": Decimal(10)}


@pytest.mark.parametrize(
    ("exit_code", "signal_number", "expected"),
    [
        (137, None, "SIGKILL"),
        (139, None, "SIGSEGV"),
        (143, None, "SIGTERM"),
        (134, None, "SIGABRT"),
        (1, None, None),
        (0, None, None),
        (255, None, None),
        (None, 9, "SIGKILL"),
        (150, None, "signal 22"),
    ],
)
def test_signal_name(exit_code: int | None, signal_number: int | None, expected: str | None) -> None:
    assert signal_name(exit_code, signal_number) == expected


# ------------------------------------------------------------------------------------------------ events, render


def test_event_lines_sorted_by_last_timestamp_with_counts_and_limit() -> None:
    events = [
        make_event("BackOff", "Back-off restarting", ago=5, count=9),
        make_event("Scheduled", "assigned", type_="Normal", ago=3 * 3600),
        make_event("FailedScheduling", "0/2 nodes are available:\n 2 Insufficient cpu.", ago=12, count=3),
        make_event("Pulled", "pulled", type_="Normal", ago=300),
    ]
    assert event_lines(events, now=NOW) == (
        "3h ago  Normal  Scheduled  assigned",
        "5m ago  Normal  Pulled  pulled",
        "12s ago  Warning  FailedScheduling (x3)  0/2 nodes are available: 2 Insufficient cpu.",
        "5s ago  Warning  BackOff (x9)  Back-off restarting",
    )
    assert event_lines(events, limit=1, now=NOW) == ("5s ago  Warning  BackOff (x9)  Back-off restarting",)
    assert event_lines(events, limit=0, now=NOW) == ()


def test_render_is_bounded() -> None:
    problem = Problem(
        pod="actor-0",
        container="guard",
        reason="CrashLoopBackOff",
        fatal=True,
        exit_code=1,
        message="\n".join(f"line {i} " + "x" * 1000 for i in range(100)),
        advice="y" * 5000,
        events=tuple(f"event {i}" for i in range(50)),
        log_tail=tuple(f"log {i} " + "z" * 500 for i in range(100)),
    )
    lines = problem.render().splitlines()
    assert len(lines) <= MAX_RENDER_LINES
    assert all(len(line) <= MAX_LINE_CHARS for line in lines)
    assert lines[0] == "actor-0 (container guard): CrashLoopBackOff [fatal]"
    assert any("lines omitted" in line for line in lines)
    assert any("event 49" in line for line in lines) and not any("event 39" in line for line in lines)
    assert any("log 99" in line for line in lines)


def test_render_of_a_small_problem() -> None:
    problem = Problem(
        pod="actor-1", reason="Unschedulable", fatal=False, message="0/1 nodes are available", advice="add nodes"
    )
    assert problem.render() == (
        "actor-1: Unschedulable [not fatal yet, still waiting]\n  message: 0/1 nodes are available\n  advice: add nodes"
    )
    assert problem.exit_code_or(7) == 7


def test_problem_is_frozen() -> None:
    problem = Problem(pod="p", reason="r", fatal=True)
    with pytest.raises(AttributeError):
        problem.reason = "other"  # type: ignore[misc]


def test_summarize_role_puts_the_first_fatal_problem_first() -> None:
    waiting = Problem(pod="actor-0", reason="Unschedulable", fatal=False, message="0/4 nodes")
    pull = Problem(
        pod="actor-1",
        container="guard",
        reason="ImagePullBackOff",
        fatal=True,
        message="Back-off",
        advice="check image.tag",
    )
    pull_2 = Problem(pod="actor-2", container="guard", reason="ImagePullBackOff", fatal=True, message="Back-off")
    summary = summarize_role([waiting, pull, pull_2])
    assert summary.startswith("actor-1 (container guard): ImagePullBackOff [fatal]")
    assert "check image.tag" in summary
    assert summary.splitlines()[-1] == (
        "and 2 other worker(s): 1 Unschedulable (waiting) (actor-0); 1 ImagePullBackOff (actor-2)"
    )
    assert summarize_role([pull]) == pull.render()
    assert summarize_role([]) == "no problems found"


def test_uncounted_scheduler_reason() -> None:
    message = (
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are "
        "available: 3 Preemption is not helpful for scheduling."
    )
    problem = diagnose_pod(pending_pod(message))
    assert problem is not None and not problem.fatal
    assert "check the PVCs and their StorageClass" in problem.advice


@pytest.mark.parametrize("phase,exit_code", [("Failed", 137), ("Succeeded", 0)])
def test_a_pod_in_a_terminal_phase_because_it_is_being_deleted_is_terminating(phase: str, exit_code: int) -> None:
    """A real kubelet sets Failed (a SIGKILL after the grace period) or Succeeded on a deleted pod whose container
    stopped, e.g. the StatefulSet replacing it in an update: that is not the worker failing."""
    pod = make_pod(
        phase=phase,
        statuses=[container_status(state_terminated=terminated(exit_code, "Error"))],
        conditions=ready_conditions(False),
    )
    pod.metadata.deletion_timestamp = NOW
    problem = diagnose_pod(pod, was_ready=False)
    assert problem is not None and problem.reason == "Terminating" and not problem.fatal
    assert diagnose_pod(pod, was_ready=True).fatal  # a worker that was ready loses its engines either way
