"""Container checks: waiting reasons (image pulls, configuration errors, crash loops), terminations, restarts and
volume mounts, with advice per exit code and signal."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from kubernetes.client import CoreV1Event, V1Container, V1ContainerStateTerminated, V1ContainerStatus, V1Pod

from ..reasons import Reason
from .problem import EPOCH, Problem, event_count, event_time, pod_name

_SIGNALS = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    5: "SIGTRAP",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    10: "SIGUSR1",
    11: "SIGSEGV",
    12: "SIGUSR2",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
}
_PROGRESSING_WAITING = frozenset({"ContainerCreating", "PodInitializing"})
_FATAL_WAITING = frozenset(
    {
        Reason.IMAGE_PULL_BACK_OFF,
        Reason.INVALID_IMAGE_NAME,
        Reason.ERR_IMAGE_NEVER_PULL,
        Reason.CRASH_LOOP_BACK_OFF,
        Reason.CREATE_CONTAINER_CONFIG_ERROR,
        Reason.CREATE_CONTAINER_ERROR,
        Reason.RUN_CONTAINER_ERROR,
        Reason.START_ERROR,
        Reason.CONTAINER_CANNOT_RUN,
        Reason.PRE_START_HOOK_ERROR,
        Reason.POST_START_HOOK_ERROR,
        Reason.PRE_CREATE_HOOK_ERROR,
    }
)
_IMAGE_MISSING = re.compile(r"not found|manifest unknown|does not exist|invalid reference format", re.IGNORECASE)
_ACCESS_DENIED = re.compile(r"unauthorized|denied|authentication required|forbidden|\b40[13]\b", re.IGNORECASE)
_RUNTIME_LOST = frozenset({Reason.UNKNOWN, Reason.CONTAINER_STATUS_UNKNOWN})
_MISSING_OBJECT = re.compile(
    r'(secret|configmap|persistentvolumeclaim)s? "([^"]+)" not found'
    r"|couldn't find key (\S+) in (Secret|ConfigMap) ([\w.-]+)/([\w.-]+)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Readiness:
    """Whether the worker was ready, and each main container's restartCount that is accounted for: at the moment it
    was ready, or when the scheduler had restarted it in place (restarts up to these are not problems)."""

    was_ready: bool = False
    baseline: Mapping[str, int] = field(default_factory=dict)

    def new_restarts(self, status: V1ContainerStatus) -> int:
        return max(0, (status.restart_count or 0) - self.baseline.get(status.name, 0))


# ---------------------------------------------------------------------------------------------------------------
# Signals and exit codes


def signal_name(exit_code: int | None, signal_number: int | None = None) -> str | None:
    """ "SIGKILL" for exit code 137 (128 + 9), None for ordinary exit codes."""
    number = signal_number or (exit_code - 128 if exit_code is not None and 128 < exit_code <= 128 + 64 else None)
    if number is None:
        return None
    return _SIGNALS.get(number, f"signal {number}")


def _exit_advice(
    pod: V1Pod, container: str, exit_code: int | None, signal: str | None, reason: str, *, previous: bool = True
) -> str:
    if reason == "OOMKilled":
        limit = _memory_limit(pod, container)
        if limit is None:
            return (
                "the node ran out of memory and killed the worker (no memory limit): raise resources.memory so the "
                "scheduler reserves enough, or make the worker use less"
            )
        return (
            f"the worker used more than its memory limit {limit}: raise resources.memory (shm.sizeLimit counts "
            "against it too) or make the worker use less (smaller batches or micro-batches)"
        )
    by_signal = {
        "SIGKILL": "killed with SIGKILL but not by the container's OOM killer: a failed liveness probe, the kubelet, "
        "or the node's OOM killer; check the events",
        "SIGSEGV": "segmentation fault in native code: check the log tail for the failing library "
        "(CUDA/NCCL/driver versions of the image vs the node)",
        "SIGBUS": "SIGBUS, often shared memory exhausted: raise shm.sizeLimit (NCCL, dataloader workers)",
        "SIGABRT": "aborted (an assertion or uncaught C++ exception in native code): check the log tail",
        "SIGTERM": "stopped with SIGTERM: something asked it to stop (a liveness probe, deletion, preemption); "
        "check the events",
    }
    if signal in by_signal:
        return by_signal[signal]
    if exit_code == 127:
        return "command not found: check the role's command and the image's PATH"
    if exit_code == 126:
        return "the command is not executable: check the role's command and the file's permissions"
    if exit_code == 0:
        return "the worker exited with code 0, but AReaL's guard must keep running: check the role's command"
    logs = f"kubectl logs {_kubectl_pod(pod)} -c {container}" + (" --previous" if previous else "")
    return f"the worker exited with code {exit_code}: read the log tail ({logs}); fix the command, environment or code"


def _kubectl_pod(pod: V1Pod) -> str:
    """The pod as a kubectl command names it: with -n, since the reader's context may default to another namespace."""
    namespace = pod.metadata.namespace if pod.metadata is not None else None
    return f"-n {namespace} {pod_name(pod)}" if namespace else pod_name(pod)


def _memory_limit(pod: V1Pod, container: str) -> str | None:
    spec = _spec_container(pod, container)
    limits = spec.resources.limits if spec is not None and spec.resources is not None else None
    return (limits or {}).get("memory")


# ---------------------------------------------------------------------------------------------------------------
# Container statuses


def _spec_container(pod: V1Pod, name: str) -> V1Container | None:
    spec = pod.spec
    return next((c for c in [*(spec.containers or []), *(spec.init_containers or [])] if c.name == name), None)


def _image_of(pod: V1Pod, status: V1ContainerStatus) -> str:
    spec = _spec_container(pod, status.name)
    return (spec.image if spec is not None else None) or status.image or "?"


def container_problem_of(pod: V1Pod, readiness: Readiness) -> Problem | None:
    status = pod.status
    found = [
        problem
        for statuses, init in ((status.init_container_statuses, True), (status.container_statuses, False))
        for container_status in statuses or []
        if (problem := _container_problem(pod, container_status, init=init, readiness=readiness)) is not None
    ]
    return next((problem for problem in found if problem.fatal), found[0] if found else None)


def _container_problem(pod: V1Pod, status: V1ContainerStatus, *, init: bool, readiness: Readiness) -> Problem | None:
    state = status.state
    last = status.last_state.terminated if status.last_state is not None else None
    after_ready = readiness.was_ready and not init and readiness.new_restarts(status) > 0
    if state is not None and state.waiting is not None and state.waiting.reason not in _PROGRESSING_WAITING:
        return _waiting_problem(pod, status, init=init, after_ready=after_ready)
    if state is not None and state.terminated is not None:
        if init and state.terminated.exit_code == 0:
            return None
        return _terminated_problem(
            pod, status, state.terminated, init=init, after_ready=readiness.was_ready and not init, current=True
        )
    # A restart counted before readiness (was_ready) or one the container recovered from (ready now) is history.
    recovered = not readiness.was_ready and bool(status.ready)
    if last is not None and readiness.new_restarts(status) > 0 and not recovered:
        return _terminated_problem(pod, status, last, init=init, after_ready=after_ready, current=False)
    if after_ready:
        return Problem(
            pod=pod_name(pod),
            container=status.name,
            reason=Reason.RESTARTED_AFTER_READY,
            fatal=True,
            node=pod.spec.node_name,
            message=f"restarted {readiness.new_restarts(status)} time(s) after the worker was ready: its engines are "
            "lost",
            advice=LOST_ENGINES + "; check the events for why it restarted",
        )
    return None


LOST_ENGINES = "the worker was ready, so its engines are gone and AReaL cannot reattach them: restart the role"


def _what(status: V1ContainerStatus, init: bool) -> str:
    return f"{'init container' if init else 'container'} {status.name}"


def _waiting_problem(pod: V1Pod, status: V1ContainerStatus, *, init: bool, after_ready: bool) -> Problem:
    waiting = status.state.waiting
    reason = waiting.reason or "Waiting"
    message = waiting.message or f"{_what(status, init)} is waiting: {reason}"
    last = status.last_state.terminated if status.last_state is not None else None
    if reason == "CrashLoopBackOff" and last is not None:
        return _crash_loop_problem(pod, status, last, message=message, after_ready=after_ready)
    fatal = reason in _FATAL_WAITING or (
        reason == "ErrImagePull" and bool(_IMAGE_MISSING.search(message) or _ACCESS_DENIED.search(message))
    )
    advice = _waiting_advice(pod, status, reason, message)
    if after_ready:
        advice = f"{advice}; {LOST_ENGINES}"
    return Problem(
        pod=pod_name(pod),
        container=status.name,
        reason=reason,
        message=message,
        fatal=fatal,
        advice=advice,
        node=pod.spec.node_name,
    )


def _crash_loop_problem(
    pod: V1Pod, status: V1ContainerStatus, last: V1ContainerStateTerminated, *, message: str, after_ready: bool
) -> Problem:
    signal = signal_name(last.exit_code, last.signal)
    oom = last.reason == "OOMKilled"
    summary = f"{message}; last termination: {last.reason or 'Error'}, exit code {last.exit_code}"
    summary += f" ({signal})" if signal else ""
    summary += f": {last.message.strip()}" if last.message and last.message.strip() else ""
    advice = _exit_advice(pod, status.name, last.exit_code, signal, last.reason or "")
    if after_ready:
        advice = f"{advice}; {LOST_ENGINES}"
    return Problem(
        pod=pod_name(pod),
        container=status.name,
        reason=Reason.OOM_KILLED if oom else Reason.CRASH_LOOP_BACK_OFF,
        message=summary,
        exit_code=last.exit_code,
        signal=signal,
        fatal=True,
        advice=advice,
        node=pod.spec.node_name,
    )


def _terminated_problem(
    pod: V1Pod,
    status: V1ContainerStatus,
    terminated: V1ContainerStateTerminated,
    *,
    init: bool,
    after_ready: bool,
    current: bool,
) -> Problem:
    code = terminated.exit_code
    signal = signal_name(code, terminated.signal)
    k8s_reason = terminated.reason or (Reason.COMPLETED if code == 0 else Reason.ERROR)
    restarted_after_ready = after_ready and not current and k8s_reason != "OOMKilled"
    reason = Reason.RESTARTED_AFTER_READY if restarted_after_ready else k8s_reason
    verb = "terminated" if current else f"restarted ({status.restart_count or 0} restarts); it last terminated"
    if restarted_after_ready:
        restarts = status.restart_count or 0
        verb = (
            f"restarted after the worker was ready, so its engines are lost ({restarts} restarts); it last terminated"
        )
    message = f"{_what(status, init)} {verb}: {k8s_reason}, exit code {code}" + (f" ({signal})" if signal else "")
    message += f": {terminated.message.strip()}" if terminated.message and terminated.message.strip() else ""
    advice = _exit_advice(pod, status.name, code, signal, k8s_reason, previous=not current)
    if after_ready:
        advice = f"{advice}; {LOST_ENGINES}"
    # A container lost to a runtime or node restart before readiness is not the program's fault: let it come back.
    fatal = current or after_ready or k8s_reason not in _RUNTIME_LOST
    return Problem(
        pod=pod_name(pod),
        container=status.name,
        reason=reason,
        message=message,
        exit_code=code,
        signal=signal,
        fatal=fatal,
        advice=advice,
        node=pod.spec.node_name,
    )


def _waiting_advice(pod: V1Pod, status: V1ContainerStatus, reason: str, message: str) -> str:
    image = _image_of(pod, status)
    if reason in ("ErrImagePull", "ImagePullBackOff"):
        return _pull_advice(image, message, [s.name for s in pod.spec.image_pull_secrets or [] if s.name])
    if reason == "InvalidImageName":
        return (
            f"{image!r} is not a valid image reference: fix image.repository/image.tag "
            "(lowercase, registry/repository:tag or repository@sha256:digest)"
        )
    if reason == "ErrImageNeverPull":
        return (
            f"imagePullPolicy is Never and {image} is not on the node: pre-load it or set image.pullPolicy IfNotPresent"
        )
    if reason == "CreateContainerConfigError":
        return _config_advice(pod, message)
    if reason in ("CreateContainerError", "RunContainerError", "StartError", "ContainerCannotRun"):
        return (
            "the container runtime could not start the worker: check the role's command (does it exist in the "
            "image?), volume mounts and securityContext against the message"
        )
    if reason.endswith("HookError"):
        return "a lifecycle hook failed: fix or remove the hook"
    return f"not a known failure: check the events and `kubectl describe pod {_kubectl_pod(pod)}`"


def _registry_host(image: str) -> str:
    first, slash, _ = image.partition("/")
    return first if slash and ("." in first or ":" in first or first == "localhost") else "docker.io"


def _pull_advice(image: str, message: str, secrets: list[str]) -> str:
    if _IMAGE_MISSING.search(message) and not _ACCESS_DENIED.search(message):
        return f"image {image} does not exist: check image.repository and image.tag (a typo? was the tag pushed?)"
    if _ACCESS_DENIED.search(message):
        host = _registry_host(image)
        if secrets:
            return (
                f"the registry refused {image} with the login of image pull Secret(s) {', '.join(secrets)}: check "
                f"that the image exists and that the Secret holds a valid login for {host} (kubectl create secret "
                f"docker-registry NAME --docker-server={host} --docker-username=... --docker-password=...)"
            )
        return (
            f"the registry refused {image} and the pod has no image pull Secret: add the registry's credentials to "
            f"image.pullSecrets (kubectl create secret docker-registry NAME --docker-server={host} "
            "--docker-username=... --docker-password=...)"
        )
    return (
        f"the node could not pull {image}: check that the image exists, that the nodes can reach the registry, "
        "and image.pullSecrets for a private registry"
    )


def pull_secret_race(problem: Problem, events: Sequence[CoreV1Event]) -> Problem:
    """A refused first pull while the kubelet could not yet read the pod's pull Secret is not final: the kubelet
    reads Secrets for pods bound to it, the apiserver's node authorizer learns that binding a moment later, and the
    kubelet pulls without credentials meanwhile. Its next pull, after the back-off, sends them."""
    if problem.reason not in ("ErrImagePull", "ImagePullBackOff") or not _ACCESS_DENIED.search(problem.message):
        return problem
    secret_unread = any(e.reason == "FailedToRetrieveImagePullSecret" for e in events)
    failed_pulls = sum(
        event_count(e) for e in events if e.reason == "Failed" and (e.message or "").startswith("Failed to pull")
    )
    if not secret_unread or failed_pulls > 1:
        return problem
    return replace(
        problem,
        fatal=False,
        advice="the kubelet pulled before it could read the pod's image pull Secret; it retries with the Secret "
        "after its back-off. " + problem.advice,
    )


def _config_advice(pod: V1Pod, message: str) -> str:
    namespace = pod.metadata.namespace or "the release namespace"
    match = _MISSING_OBJECT.search(message)
    if match and match.group(1):
        kind, name = match.group(1).lower(), match.group(2)
        create = {"secret": "secret generic", "configmap": "configmap"}.get(kind)
        how = f" (kubectl -n {namespace} create {create} {name} --from-literal=...)" if create else ""
        return (
            f"{kind} {name} does not exist in namespace {namespace}: create it{how} or fix the reference in "
            "env/envFrom/extraVolumes"
        )
    if match:
        key, kind, name = match.group(3), match.group(4), match.group(6)
        return f"{kind} {name} has no key {key}: add the key or fix the reference in env/envFrom"
    if "runAsNonRoot" in message:
        return (
            "the image runs as root but the pod requires runAsNonRoot: set podSecurityContext.runAsUser "
            "or use a non-root image"
        )
    return "the container's configuration cannot be resolved: fix the Secret/ConfigMap references or securityContext"


def mount_problem(pod: V1Pod, events: Sequence[CoreV1Event]) -> Problem | None:
    """A pod stuck in ContainerCreating because a volume or the sandbox cannot be set up."""
    if not pod.spec.node_name or pod.status.phase != "Pending":
        return None
    relevant = [
        e
        for e in events
        if e.reason
        in ("FailedMount", "FailedAttachVolume", "FailedCreatePodSandBox", "Pulling", "Pulled", "Created", "Started")
    ]
    latest = max(relevant, key=lambda event: event_time(event) or EPOCH, default=None)
    if latest is None or not (latest.reason or "").startswith("Failed"):
        return None
    message = latest.message or latest.reason
    match = _MISSING_OBJECT.search(message)
    if match and match.group(1):
        kind, name = match.group(1).lower(), match.group(2)
        advice = f"{kind} {name} does not exist in namespace {pod.metadata.namespace}: create it or fix extraVolumes"
    elif latest.reason == "FailedCreatePodSandBox":
        advice = "the node could not set up the pod's sandbox or network (CNI): check the node's network plugin"
    else:
        advice = "the volume cannot be attached or mounted yet: check the PVC, its StorageClass and the CSI driver"
    return Problem(
        pod=pod_name(pod),
        reason=latest.reason,
        message=message,
        fatal=bool(match and match.group(1)),
        advice=advice,
        node=pod.spec.node_name,
    )


def probe_problem(pod: V1Pod, events: Sequence[CoreV1Event]) -> Problem | None:
    """A running container the kubelet's readiness or startup probe keeps failing: not fatal (the worker may still be
    starting), but the kubelet's own words are the first thing to read when the wait times out."""
    if pod.status.phase != "Running":
        return None
    failures = [e for e in events if e.reason == "Unhealthy" and "probe failed" in (e.message or "")]
    latest = max(failures, key=lambda event: event_time(event) or EPOCH, default=None)
    if latest is None:
        return None
    return Problem(
        pod=pod_name(pod),
        reason=Reason.PROBE_FAILING,
        message=latest.message or "",
        fatal=False,
        node=pod.spec.node_name,
        advice="the worker runs but does not answer its probe (GET /health on the guard port of the pod "
        "IP): it may still be starting, listen on another address or port, or be stuck; read its "
        "log tail below",
    )
