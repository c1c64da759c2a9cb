"""Why a worker is not ready: pure functions from Kubernetes objects to a `Problem` that names the cause and the fix.

Nothing here calls the API: the caller fetches the pod, the nodes, the pods on each node, the events and the last
log lines and passes them in. `diagnose_pod` returns None for a healthy or merely progressing pod (Pending in
ContainerCreating, Running but not Ready yet without restarts) and a `Problem` otherwise. `Problem.fatal` says
whether the role must fail now (waiting cannot fix it, or the worker's engines are already gone) or whether waiting
may still help (the problem is then attached to the WorkerTimeoutError if the wait runs out).

Fatal or not, and why:

* Pod phase Failed (Evicted, Preempting, DeadlineExceeded, OutOf<resource>, ...) or Succeeded: fatal, the pod never
  runs again; its replacement is a new worker without engines.
* DisruptionTarget condition (preemption, API eviction, taint-manager or pod-GC deletion): fatal, the pod is being
  killed. Any other deletion: fatal only for a worker that was ready (engines going away); before that the
  StatefulSet simply recreates it (a rollback replacing a broken pod looks like this).
* Node NotReady or deleted: fatal. A StatefulSet never starts a second pod with the same identity while the old one
  may still run, so a pod on an unreachable node stays put until the node returns or is deleted; the taint manager
  waits 300 s before it even starts the eviction.
* ErrImagePull: not fatal, unless the registry says the image does not exist or access is denied: a registry hiccup
  heals, and a repeated failure turns into ImagePullBackOff within seconds.
* ImagePullBackOff, InvalidImageName, ErrImageNeverPull: fatal, the kubelet already failed or cannot ever succeed.
* CrashLoopBackOff: fatal, the worker keeps crashing and the kubelet is backing off its restarts.
* CreateContainerConfigError, CreateContainerError, RunContainerError, StartError, ContainerCannotRun, hook errors:
  fatal, the spec (a missing Secret/ConfigMap key, runAsNonRoot with a root image, a missing command) needs a human.
* A main container that terminated (any exit code) or restarted: fatal. Workers run with restartPolicy Always and
  AReaL's guard never exits on purpose: the process that held the engines is gone, and a crash before readiness
  repeats (the next stop is CrashLoopBackOff). OOMKilled repeats until the memory changes. Exception: a restart
  before readiness whose last state is Unknown/ContainerStatusUnknown (runtime or node restart, not the program).
* Init container terminated with a non-zero exit: fatal. Exit 0 is its normal end.
* restartCount > 0 of a worker that was ready, or a pod recreated since (another uid than `ready_pod`): fatal
  (RestartedAfterReady), its engines are gone. With `ready_pod`, restarts before readiness are not counted.
* Volume mount of a missing Secret/ConfigMap/PVC: fatal; other FailedMount / sandbox failures: not fatal (attach
  and network set-up retry on their own).
* Unschedulable: fatal when no node can ever host the pod: the nodeSelector/affinity matches no node, every matching
  node has a taint the pod does not tolerate, no node offers the resource, or no eligible node's allocatable is large
  enough. Not fatal when it fits some node's allocatable and only waits for resources in use, cordoned or NotReady
  nodes, ports, pod (anti-)affinity or volumes, or when cluster-autoscaler triggered a scale-up. Without nodes the
  scheduler's message decides: fatal only when every node was rejected for a taint or selector.
* SchedulingGated: not fatal (a queue such as Kueue admits the pod later).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

from kubernetes.client import (
    CoreV1Event,
    V1Container,
    V1ContainerStateTerminated,
    V1ContainerStatus,
    V1Node,
    V1NodeSelectorRequirement,
    V1Pod,
    V1PodCondition,
    V1NodeSelectorTerm,
    V1Taint,
    V1Toleration,
)

__all__ = [
    "NodeFit",
    "Problem",
    "describe_selector",
    "diagnose_pod",
    "event_lines",
    "format_quantity",
    "node_fit",
    "parse_quantity",
    "pod_requests",
    "scheduling_advice",
    "signal_name",
    "summarize_role",
]

MAX_RENDER_LINES = 40
MAX_LINE_CHARS = 200
MAX_MESSAGE_LINES = 6
MAX_ADVICE_LINES = 4
EVENT_LIMIT = 10
LOG_LIMIT = 20

_SIGNALS = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
    9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
}
_PROGRESSING_WAITING = frozenset({"ContainerCreating", "PodInitializing"})
_FATAL_WAITING = frozenset({
    "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CrashLoopBackOff", "CreateContainerConfigError",
    "CreateContainerError", "RunContainerError", "StartError", "ContainerCannotRun", "PreStartHookError",
    "PostStartHookError", "PreCreateHookError",
})
_IMAGE_MISSING = re.compile(r"not found|manifest unknown|does not exist|invalid reference format", re.IGNORECASE)
_ACCESS_DENIED = re.compile(r"unauthorized|denied|authentication required|forbidden|\b40[13]\b", re.IGNORECASE)
_RUNTIME_LOST = frozenset({"Unknown", "ContainerStatusUnknown"})
_DISRUPTIONS = {
    "PreemptionByScheduler": "Preempted",
    "PreemptionByKubeScheduler": "Preempted",
    "EvictionByEvictionAPI": "Evicted",
    "TerminationByKubelet": "Evicted",
    "DeletionByTaintManager": "NodeNotReady",
    "DeletionByPodGC": "NodeGone",
}
_MISSING_OBJECT = re.compile(
    r'(secret|configmap|persistentvolumeclaim)s? "([^"]+)" not found'
    r"|couldn't find key (\S+) in (Secret|ConfigMap) ([\w.-]+)/([\w.-]+)",
    re.IGNORECASE,
)
# Taints that node lifecycle, cordon and pressure set and remove on their own.
_TRANSIENT_TAINT_PREFIX = "node.kubernetes.io/"
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_GONE_PHASES = frozenset({"Succeeded", "Failed"})
_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class _Readiness:
    """Whether the worker was ready, and each main container's restartCount at that moment."""

    was_ready: bool = False
    baseline: Mapping[str, int] = field(default_factory=dict)

    def new_restarts(self, status: V1ContainerStatus) -> int:
        return (status.restart_count or 0) - (self.baseline.get(status.name, 0) if self.was_ready else 0)


# ---------------------------------------------------------------------------------------------------------------
# Problem


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Why one worker pod is not ready. `message` is Kubernetes' own text; `advice` says what to change."""

    pod: str
    container: str | None = None
    reason: str
    message: str = ""
    exit_code: int | None = None
    signal: str | None = None
    fatal: bool
    advice: str = ""
    events: tuple[str, ...] = ()
    log_tail: tuple[str, ...] = ()
    node: str | None = None

    def exit_code_or(self, default: int) -> int:
        """The container's exit code, or `default` (for WorkerFailedError) when there is none."""
        return self.exit_code if self.exit_code is not None else default

    def render(self) -> str:
        """At most MAX_RENDER_LINES lines of at most MAX_LINE_CHARS characters."""
        where = self.pod + (f" (container {self.container})" if self.container else "")
        where += f" on node {self.node}" if self.node else ""
        verdict = "fatal" if self.fatal else "not fatal yet, still waiting"
        lines = [_clip(f"{where}: {self.reason} [{verdict}]")]
        lines += _labelled("message", self.message, MAX_MESSAGE_LINES)
        if self.exit_code is not None:
            lines.append(f"  exit code: {self.exit_code}" + (f" ({self.signal})" if self.signal else ""))
        lines += _labelled("advice", self.advice, MAX_ADVICE_LINES)
        lines += _section("events", self.events, min(EVENT_LIMIT, MAX_RENDER_LINES - len(lines) - 1))
        lines += _section("log tail", self.log_tail, MAX_RENDER_LINES - len(lines) - 1)
        return "\n".join(lines)


def _clip(text: str, limit: int = MAX_LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _labelled(label: str, text: str, max_lines: int) -> list[str]:
    """`label: text` wrapped to MAX_LINE_CHARS; beyond max_lines, the head and the last line are kept."""
    first_width = MAX_LINE_CHARS - len(label) - 4
    body = []
    for line in (line for line in text.strip().splitlines() if line.strip()):
        body += textwrap.wrap(line, width=first_width if not body else MAX_LINE_CHARS - 4) or [""]
    if len(body) > max_lines:
        body = [*body[: max_lines - 2], f"({len(body) - max_lines + 1} lines omitted)", body[-1]]
    if not body:
        return []
    return [_clip(f"  {label}: {body[0]}"), *(_clip(f"    {line}") for line in body[1:])]


def _section(title: str, items: Sequence[str], budget: int) -> list[str]:
    if not items or budget < 1:
        return []
    shown = items[-budget:]
    omitted = f", {len(items) - len(shown)} earlier omitted" if len(shown) < len(items) else ""
    return [f"  {title} (last {len(shown)}{omitted}):", *(_clip(f"    {item}") for item in shown)]


# ---------------------------------------------------------------------------------------------------------------
# Quantities and requests


_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?\d+))?$"
)
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(quantity: str | int | float | Decimal) -> Decimal:
    """A Kubernetes quantity ("500m", "64Gi", "1.5G", "2e3", 8) as a Decimal in base units (cores, bytes, devices)."""
    if isinstance(quantity, (int, float, Decimal)):
        return Decimal(str(quantity))
    match = _QUANTITY.match(quantity.strip())
    if match is None:
        raise ValueError(f"invalid Kubernetes quantity {quantity!r}")
    number, suffix, exponent = match.group("number", "suffix", "exponent")
    try:
        value = Decimal(number)
    except InvalidOperation as error:
        raise ValueError(f"invalid Kubernetes quantity {quantity!r}") from error
    if suffix in _BINARY_SUFFIXES:
        return value * (1024 ** _BINARY_SUFFIXES[suffix])
    if suffix:
        return value.scaleb(_DECIMAL_SUFFIXES[suffix])
    return value.scaleb(int(exponent)) if exponent else value


def format_quantity(resource: str, value: Decimal) -> str:
    """A base-unit amount for people: memory in Ki/Mi/Gi/Ti, fractional cpu in millicores, the rest as a number."""
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for unit, power in (("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)):
            scaled = value / (1024 ** power)
            if abs(scaled) >= 1:
                return f"{_trim(scaled.quantize(Decimal('0.1')))}{unit}"
        return _trim(value)
    if resource == "cpu" and value != value.to_integral_value():
        return f"{_trim((value * 1000).quantize(Decimal('1')))}m"
    return _trim(value)


def _trim(value: Decimal) -> str:
    text = f"{value.normalize():f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _container_requests(container: V1Container) -> dict[str, Decimal]:
    resources = container.resources
    if resources is None:
        return {}
    # The API server defaults a missing request to the limit (extended resources such as GPUs are often limit-only).
    merged = {**(resources.limits or {}), **(resources.requests or {})}
    return {name: parse_quantity(value) for name, value in merged.items()}


def pod_requests(pod: V1Pod) -> dict[str, Decimal]:
    """What the scheduler reserves for the pod: containers and sidecars summed, the largest init container, overhead."""
    spec = pod.spec
    sidecars = [c for c in spec.init_containers or [] if c.restart_policy == "Always"]
    total: dict[str, Decimal] = {}
    for container in [*(spec.containers or []), *sidecars]:
        _add_to(total, _container_requests(container))
    for container in spec.init_containers or []:
        if container.restart_policy != "Always":
            for name, value in _container_requests(container).items():
                total[name] = max(total.get(name, Decimal(0)), value)
    _add_to(total, {name: parse_quantity(value) for name, value in (spec.overhead or {}).items()})
    return {name: value for name, value in total.items() if value > 0}


def _add_to(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value


def _values_key(resource: str) -> str:
    """The chart's values key for a resource, for advice."""
    if resource == "cpu":
        return "resources.cpu"
    if resource == "memory":
        return "resources.memory"
    if "gpu" in resource:
        return "resources.gpu"
    return f"the {resource} request"


# ---------------------------------------------------------------------------------------------------------------
# Signals and exit codes


def signal_name(exit_code: int | None, signal_number: int | None = None) -> str | None:
    """"SIGKILL" for exit code 137 (128 + 9), None for ordinary exit codes."""
    number = signal_number or (exit_code - 128 if exit_code is not None and 128 < exit_code <= 128 + 64 else None)
    if number is None:
        return None
    return _SIGNALS.get(number, f"signal {number}")


def _exit_advice(pod: V1Pod, container: str, exit_code: int | None, signal: str | None, reason: str, *,
                 previous: bool = True) -> str:
    if reason == "OOMKilled":
        limit = _memory_limit(pod, container)
        if limit is None:
            return ("the node ran out of memory and killed the worker (no memory limit): raise resources.memory so the "
                    "scheduler reserves enough, or make the worker use less")
        return (f"the worker used more than its memory limit {limit}: raise resources.memory (shm.sizeLimit counts "
                "against it too) or make the worker use less (smaller batches or micro-batches)")
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
    logs = f"kubectl logs {_name(pod)} -c {container}" + (" --previous" if previous else "")
    return f"the worker exited with code {exit_code}: read the log tail ({logs}); fix the command, environment or code"


def _memory_limit(pod: V1Pod, container: str) -> str | None:
    spec = _spec_container(pod, container)
    limits = spec.resources.limits if spec is not None and spec.resources is not None else None
    return (limits or {}).get("memory")


# ---------------------------------------------------------------------------------------------------------------
# Events and logs


def _timestamp(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _event_time(event: CoreV1Event) -> datetime | None:
    candidates = (
        event.series.last_observed_time if event.series is not None else None,
        event.last_timestamp,
        event.event_time,
        event.first_timestamp,
        event.metadata.creation_timestamp if event.metadata is not None else None,
    )
    return next((_timestamp(value) for value in candidates if value is not None), None)


def _event_count(event: CoreV1Event) -> int:
    if event.series is not None and event.series.count:
        return event.series.count
    return event.count or 1


def _age(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "?"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size, switch in (("s", 1, 120), ("m", 60, 120 * 60), ("h", 3600, 48 * 3600)):
        if seconds < switch:
            return f"{seconds // size}{unit}"
    return f"{seconds // 86400}d"


def event_lines(
    events: Iterable[CoreV1Event], limit: int = EVENT_LIMIT, *, now: datetime | None = None
) -> tuple[str, ...]:
    """The last `limit` events by time, oldest first, as
    "12s ago  Warning  FailedScheduling (x3)  0/2 nodes are available: ..."."""
    now = _timestamp(now) or datetime.now(timezone.utc)
    ordered = sorted(events, key=lambda event: _event_time(event) or _EPOCH)
    lines = []
    for event in ordered[-limit:] if limit > 0 else []:
        count = _event_count(event)
        reason = (event.reason or "?") + (f" (x{count})" if count > 1 else "")
        message = " ".join((event.message or "").split())
        lines.append(_clip(f"{_age(_event_time(event), now)} ago  {event.type or 'Normal'}  {reason}  {message}"))
    return tuple(lines)


def _pod_events(pod: V1Pod, events: Iterable[CoreV1Event]) -> list[CoreV1Event]:
    """Events of this pod incarnation (StatefulSets reuse names, so a known uid must match) and of its node."""
    meta = pod.metadata
    node = pod.spec.node_name if pod.spec is not None else None
    kept = []
    for event in events:
        target = event.involved_object
        if target is None:
            kept.append(event)
        elif target.kind == "Node":
            if node is not None and target.name == node:
                kept.append(event)
        elif target.name == meta.name and not (target.uid and meta.uid and target.uid != meta.uid):
            kept.append(event)
    return kept


def _tail(lines: Iterable[str], limit: int = LOG_LIMIT) -> tuple[str, ...]:
    flat = [line.rstrip() for chunk in lines for line in chunk.splitlines()]
    while flat and not flat[-1]:
        flat.pop()
    return tuple(_clip(line) for line in flat[-limit:])


# ---------------------------------------------------------------------------------------------------------------
# Pod-level checks: phase, disruption, deletion, node


def _name(pod: V1Pod) -> str:
    return pod.metadata.name if pod.metadata is not None and pod.metadata.name else "?"


def _condition(pod: V1Pod, kind: str) -> V1PodCondition | None:
    conditions = pod.status.conditions if pod.status is not None else None
    return next((condition for condition in conditions or [] if condition.type == kind), None)


def _phase_problem(pod: V1Pod, readiness: _Readiness) -> Problem | None:
    status = pod.status
    if status.phase == "Succeeded":
        return Problem(pod=_name(pod), reason="Completed", fatal=True, exit_code=0,
                       message=status.message or "all containers exited with code 0",
                       advice="the worker exited, but AReaL's guard must keep running: check the role's command")
    if status.phase == "Unknown":
        return Problem(pod=_name(pod), reason="NodeNotReady", fatal=True,
                       message=status.message or "pod phase Unknown: its node stopped reporting",
                       advice=_node_not_ready_advice(pod.spec.node_name or "?"))
    if status.phase != "Failed":
        return None
    reason = status.reason or ""
    if reason in ("", "Error"):
        # An ordinary container failure: the container statuses carry the exit code.
        return _container_problem_of(pod, readiness) or Problem(
            pod=_name(pod), reason="Failed", fatal=True, message=status.message or "pod phase Failed",
            advice="read the log tail and the events")
    advice = _failed_pod_advice(reason, status.message or "")
    reason = "Preempted" if reason == "Preempting" else reason  # the kubelet's word for making room for a critical pod
    return Problem(pod=_name(pod), reason=reason, fatal=True, message=status.message or f"pod failed: {reason}",
                   advice=advice, node=pod.spec.node_name)


def _failed_pod_advice(reason: str, message: str) -> str:
    if reason == "Evicted":
        return _eviction_advice(message)
    if reason in ("Preempting", "Preempted"):
        return _PREEMPTION_ADVICE
    if reason == "DeadlineExceeded":
        return "activeDeadlineSeconds ran out: raise it or remove it for long-running workers"
    if reason.startswith("OutOf"):
        return (f"the kubelet rejected the pod at admission ({reason}): the scheduler's view of the node was stale or "
                "a device plugin lost devices; check the node, then restart the role")
    if reason in ("Shutdown", "Terminated", "NodeShutdown"):
        return "the node shut down: restart the role (it reschedules on healthy nodes)"
    if reason == "NodeAffinity":
        return "the node's labels no longer match the pod's nodeSelector/affinity: fix the labels or the selector"
    return "restart the role; check the events for the cause"


_PREEMPTION_ADVICE = ("preempted by a higher-priority pod: give the workers a higher priorityClassName or reserve "
                      "capacity for them, then restart the role")


def _eviction_advice(message: str) -> str:
    match = re.search(r"low on resource: ([\w./-]+)", message)
    resource = match.group(1).rstrip(".") if match else ""
    if resource == "memory":
        return ("the node ran low on memory and evicted the worker: set resources.memory to what the worker really "
                "uses (the chart sets requests = limits, which protects Guaranteed pods) or use nodes with more memory")
    if resource == "ephemeral-storage":
        return ("the node ran out of disk: write checkpoints and caches to a volume (extraVolumes) instead of the "
                "container filesystem or an emptyDir, or use nodes with more disk")
    if message:
        return "evicted by the kubelet or the Eviction API (a drain?): restart the role once the node is healthy"
    return "evicted: check the node's conditions and events, then restart the role"


def _disruption_problem(pod: V1Pod) -> Problem | None:
    condition = _condition(pod, "DisruptionTarget")
    if condition is None or condition.status != "True":
        return None
    reason = _DISRUPTIONS.get(condition.reason or "", "Disrupted")
    node = pod.spec.node_name
    advice = {
        "Preempted": _PREEMPTION_ADVICE,
        "Evicted": _eviction_advice(condition.message or ""),
        "NodeNotReady": _node_not_ready_advice(node or "?"),
        "NodeGone": _NODE_GONE_ADVICE,
    }.get(reason, "the pod is being terminated: restart the role")
    message = condition.message or f"DisruptionTarget: {condition.reason}"
    return Problem(pod=_name(pod), reason=reason, fatal=True, message=message, advice=advice, node=node)


def _deletion_problem(pod: V1Pod, was_ready: bool) -> Problem | None:
    deleted_at = _timestamp(pod.metadata.deletion_timestamp)
    if deleted_at is None:
        return None
    advice = ("its engines are going away: find who deleted it (events, audit log; a helm rollback or scale-down?) "
              "and restart the role" if was_ready else
              "the StatefulSet recreates it; if this repeats, find who deletes it (events, audit log)")
    return Problem(pod=_name(pod), reason="Terminating", fatal=was_ready, node=pod.spec.node_name,
                   message=f"the pod is being deleted (deletionTimestamp {deleted_at.isoformat()})",
                   advice=advice)


_NODE_GONE_ADVICE = ("the worker's node was deleted (scale-down, spot reclaim, repair): restart the role; to keep "
                     "nodes with workers, annotate the pods cluster-autoscaler.kubernetes.io/safe-to-evict=false")


def _node_not_ready_advice(node: str) -> str:
    return (f"the worker on node {node} is unreachable and the StatefulSet does not replace it until the node is back "
            f"or deleted: check the node (kubectl describe node {node}); once it is confirmed down, delete it or "
            "force-delete the pod, then restart the role")


def _is_ready(node: V1Node) -> tuple[bool, str]:
    conditions = node.status.conditions if node.status is not None else None
    ready = next((condition for condition in conditions or [] if condition.type == "Ready"), None)
    if ready is None:
        return False, "the node reports no Ready condition"
    if ready.status == "True":
        return True, ""
    detail = ": ".join(text for text in (ready.reason, ready.message) if text)
    return False, f"Ready={ready.status}" + (f" ({detail})" if detail else "")


def _node_problem(pod: V1Pod, nodes: Sequence[V1Node]) -> Problem | None:
    node_name = pod.spec.node_name
    if pod.status.reason == "NodeLost":
        return Problem(pod=_name(pod), reason="NodeNotReady", fatal=True, node=node_name,
                       message=pod.status.message or "the pod's node is lost",
                       advice=_node_not_ready_advice(node_name or "?"))
    if not node_name or not nodes:
        return None
    node = next((node for node in nodes if node.metadata.name == node_name), None)
    if node is None:
        return Problem(pod=_name(pod), reason="NodeGone", fatal=True, node=node_name,
                       message=f"node {node_name} no longer exists", advice=_NODE_GONE_ADVICE)
    ready, why = _is_ready(node)
    if ready:
        return None
    return Problem(pod=_name(pod), reason="NodeNotReady", fatal=True, node=node_name,
                   message=f"node {node_name} is NotReady: {why}", advice=_node_not_ready_advice(node_name))


# ---------------------------------------------------------------------------------------------------------------
# Container checks


def _spec_container(pod: V1Pod, name: str) -> V1Container | None:
    spec = pod.spec
    return next((c for c in [*(spec.containers or []), *(spec.init_containers or [])] if c.name == name), None)


def _image_of(pod: V1Pod, status: V1ContainerStatus) -> str:
    spec = _spec_container(pod, status.name)
    return (spec.image if spec is not None else None) or status.image or "?"


def _container_problem_of(pod: V1Pod, readiness: _Readiness) -> Problem | None:
    status = pod.status
    found = [
        problem
        for statuses, init in ((status.init_container_statuses, True), (status.container_statuses, False))
        for container_status in statuses or []
        if (problem := _container_problem(pod, container_status, init=init, readiness=readiness)) is not None
    ]
    return next((problem for problem in found if problem.fatal), found[0] if found else None)


def _container_problem(
    pod: V1Pod, status: V1ContainerStatus, *, init: bool, readiness: _Readiness
) -> Problem | None:
    state = status.state
    last = status.last_state.terminated if status.last_state is not None else None
    after_ready = readiness.was_ready and not init and readiness.new_restarts(status) > 0
    if state is not None and state.waiting is not None and state.waiting.reason not in _PROGRESSING_WAITING:
        return _waiting_problem(pod, status, init=init, after_ready=after_ready)
    if state is not None and state.terminated is not None:
        if init and state.terminated.exit_code == 0:
            return None
        return _terminated_problem(pod, status, state.terminated, init=init,
                                   after_ready=readiness.was_ready and not init, current=True)
    # A restart counted before readiness (was_ready) or one the container recovered from (ready now) is history.
    recovered = not readiness.was_ready and bool(status.ready)
    if last is not None and readiness.new_restarts(status) > 0 and not recovered:
        return _terminated_problem(pod, status, last, init=init, after_ready=after_ready, current=False)
    if after_ready:
        return Problem(pod=_name(pod), container=status.name, reason="RestartedAfterReady", fatal=True,
                       node=pod.spec.node_name,
                       message=f"restarted {readiness.new_restarts(status)} time(s) after the worker was ready",
                       advice=_LOST_ENGINES + "; check the events for why it restarted")
    return None


_LOST_ENGINES = "the worker was ready, so its engines are gone and AReaL cannot reattach them: restart the role"


def _what(status: V1ContainerStatus, init: bool) -> str:
    return f"{'init container' if init else 'container'} {status.name}"


def _waiting_problem(pod: V1Pod, status: V1ContainerStatus, *, init: bool, after_ready: bool) -> Problem:
    waiting = status.state.waiting
    reason = waiting.reason or "Waiting"
    message = waiting.message or f"{_what(status, init)} is waiting: {reason}"
    last = status.last_state.terminated if status.last_state is not None else None
    if reason == "CrashLoopBackOff" and last is not None:
        return _crash_loop_problem(pod, status, last, message=message, after_ready=after_ready)
    fatal = reason in _FATAL_WAITING or (reason == "ErrImagePull" and bool(
        _IMAGE_MISSING.search(message) or _ACCESS_DENIED.search(message)))
    advice = _waiting_advice(pod, status, reason, message)
    if after_ready:
        advice = f"{advice}; {_LOST_ENGINES}"
    return Problem(pod=_name(pod), container=status.name, reason=reason, message=message, fatal=fatal,
                   advice=advice, node=pod.spec.node_name)


def _crash_loop_problem(pod: V1Pod, status: V1ContainerStatus, last: V1ContainerStateTerminated, *,
                        message: str, after_ready: bool) -> Problem:
    signal = signal_name(last.exit_code, last.signal)
    oom = last.reason == "OOMKilled"
    summary = f"{message}; last termination: {last.reason or 'Error'}, exit code {last.exit_code}"
    summary += f" ({signal})" if signal else ""
    summary += f": {last.message.strip()}" if last.message and last.message.strip() else ""
    advice = _exit_advice(pod, status.name, last.exit_code, signal, last.reason or "")
    if after_ready:
        advice = f"{advice}; {_LOST_ENGINES}"
    return Problem(pod=_name(pod), container=status.name, reason="OOMKilled" if oom else "CrashLoopBackOff",
                   message=summary, exit_code=last.exit_code, signal=signal, fatal=True, advice=advice,
                   node=pod.spec.node_name)


def _terminated_problem(pod: V1Pod, status: V1ContainerStatus, terminated: V1ContainerStateTerminated, *,
                        init: bool, after_ready: bool, current: bool) -> Problem:
    code = terminated.exit_code
    signal = signal_name(code, terminated.signal)
    k8s_reason = terminated.reason or ("Completed" if code == 0 else "Error")
    restarted_after_ready = after_ready and not current and k8s_reason != "OOMKilled"
    reason = "RestartedAfterReady" if restarted_after_ready else k8s_reason
    verb = "terminated" if current else f"restarted ({status.restart_count or 0} restarts); it last terminated"
    message = f"{_what(status, init)} {verb}: {k8s_reason}, exit code {code}" + (f" ({signal})" if signal else "")
    message += f": {terminated.message.strip()}" if terminated.message and terminated.message.strip() else ""
    advice = _exit_advice(pod, status.name, code, signal, k8s_reason, previous=not current)
    if after_ready:
        advice = f"{advice}; {_LOST_ENGINES}"
    # A container lost to a runtime or node restart before readiness is not the program's fault: let it come back.
    fatal = current or after_ready or k8s_reason not in _RUNTIME_LOST
    return Problem(pod=_name(pod), container=status.name, reason=reason, message=message, exit_code=code,
                   signal=signal, fatal=fatal, advice=advice, node=pod.spec.node_name)


def _waiting_advice(pod: V1Pod, status: V1ContainerStatus, reason: str, message: str) -> str:
    image = _image_of(pod, status)
    if reason in ("ErrImagePull", "ImagePullBackOff"):
        return _pull_advice(image, message)
    if reason == "InvalidImageName":
        return (f"{image!r} is not a valid image reference: fix image.repository/image.tag "
                "(lowercase, registry/repository:tag or repository@sha256:digest)")
    if reason == "ErrImageNeverPull":
        return (f"imagePullPolicy is Never and {image} is not on the node: pre-load it or set image.pullPolicy "
                "IfNotPresent")
    if reason == "CreateContainerConfigError":
        return _config_advice(pod, message)
    if reason in ("CreateContainerError", "RunContainerError", "StartError", "ContainerCannotRun"):
        return ("the container runtime could not start the worker: check the role's command (does it exist in the "
                "image?), volume mounts and securityContext against the message")
    if reason.endswith("HookError"):
        return "a lifecycle hook failed: fix or remove the hook"
    return "not a known failure: check the events and `kubectl describe pod`"


def _pull_advice(image: str, message: str) -> str:
    if _IMAGE_MISSING.search(message) and not _ACCESS_DENIED.search(message):
        return f"image {image} does not exist: check image.repository and image.tag (a typo? was the tag pushed?)"
    if _ACCESS_DENIED.search(message):
        return (f"the registry refused {image}: check that it exists and add the registry's credentials to "
                "image.pullSecrets (kubectl create secret docker-registry ...)")
    return (f"the node could not pull {image}: check that the image exists, that the nodes can reach the registry, "
            "and image.pullSecrets for a private registry")


def _config_advice(pod: V1Pod, message: str) -> str:
    namespace = pod.metadata.namespace or "the release namespace"
    match = _MISSING_OBJECT.search(message)
    if match and match.group(1):
        kind, name = match.group(1).lower(), match.group(2)
        create = {"secret": "secret generic", "configmap": "configmap"}.get(kind)
        how = f" (kubectl -n {namespace} create {create} {name} --from-literal=...)" if create else ""
        return (f"{kind} {name} does not exist in namespace {namespace}: create it{how} or fix the reference in "
                "env/envFrom/extraVolumes")
    if match:
        key, kind, name = match.group(3), match.group(4), match.group(6)
        return f"{kind} {name} has no key {key}: add the key or fix the reference in env/envFrom"
    if "runAsNonRoot" in message:
        return ("the image runs as root but the pod requires runAsNonRoot: set podSecurityContext.runAsUser "
                "or use a non-root image")
    return "the container's configuration cannot be resolved: fix the Secret/ConfigMap references or securityContext"


def _mount_problem(pod: V1Pod, events: Sequence[CoreV1Event]) -> Problem | None:
    """A pod stuck in ContainerCreating because a volume or the sandbox cannot be set up."""
    if not pod.spec.node_name or pod.status.phase != "Pending":
        return None
    relevant = [e for e in events if e.reason in (
        "FailedMount", "FailedAttachVolume", "FailedCreatePodSandBox", "Pulling", "Pulled", "Created", "Started")]
    latest = max(relevant, key=lambda event: _event_time(event) or _EPOCH, default=None)
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
    return Problem(pod=_name(pod), reason=latest.reason, message=message, fatal=bool(match and match.group(1)),
                   advice=advice, node=pod.spec.node_name)


# ---------------------------------------------------------------------------------------------------------------
# Scheduling


@dataclass(frozen=True)
class NodeFit:
    """How one node stands towards one pod: selection, taints, availability, allocatable and free resources."""

    name: str
    selector_ok: bool
    hard_taints: tuple[str, ...]  # untolerated taints no controller removes by itself
    soft_block: str | None  # cordoned, NotReady or a transient taint: may clear up
    allocatable: Mapping[str, Decimal]
    free: Mapping[str, Decimal] | None  # None: pods on the node unknown


@dataclass(frozen=True)
class _Verdict:
    advice: str
    fatal: bool


def _tolerates(toleration: V1Toleration, taint: V1Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if not toleration.key:
        return toleration.operator == "Exists"
    if toleration.key != taint.key:
        return False
    return toleration.operator == "Exists" or (toleration.value or "") == (taint.value or "")


def _taint_text(taint: V1Taint) -> str:
    return f"{taint.key}" + (f"={taint.value}" if taint.value else "") + f":{taint.effect}"


def _matches_requirement(values: Mapping[str, str], requirement: V1NodeSelectorRequirement) -> bool:
    key, operator, wanted = requirement.key, requirement.operator, requirement.values or []
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            actual, bound = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def _required_terms(pod: V1Pod) -> list[V1NodeSelectorTerm]:
    affinity = pod.spec.affinity
    node_affinity = affinity.node_affinity if affinity is not None else None
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    return list(required.node_selector_terms or []) if required is not None else []


def _selector_matches(pod: V1Pod, node: V1Node) -> bool:
    labels = node.metadata.labels or {}
    if any(labels.get(key) != value for key, value in (pod.spec.node_selector or {}).items()):
        return False
    terms = _required_terms(pod)
    fields = {"metadata.name": node.metadata.name}
    return not terms or any(
        (term.match_expressions or term.match_fields)
        and all(_matches_requirement(labels, r) for r in term.match_expressions or [])
        and all(_matches_requirement(fields, r) for r in term.match_fields or [])
        for term in terms
    )


def describe_selector(pod: V1Pod, nodes: Sequence[V1Node]) -> str:
    """The pod's nodeSelector and required node affinity in words; with nodes, the values their labels have."""
    parts = []
    selector = pod.spec.node_selector or {}
    if selector:
        parts.append("nodeSelector " + ", ".join(f"{key}={value}" for key, value in selector.items()))
    terms = _required_terms(pod)
    if terms:
        described = [
            "; ".join(f"{r.key} {r.operator} {list(r.values or [])}".removesuffix(" []")
                      for r in [*(t.match_expressions or []), *(t.match_fields or [])])
            for t in terms
        ]
        parts.append("required node affinity " + " or ".join(f"({text})" for text in described))
    text = " and ".join(parts) or "the pod's node selection"
    seen = []
    for key in selector if nodes else ():
        values = sorted({(node.metadata.labels or {}).get(key) for node in nodes} - {None})
        seen.append(f"{key}: {', '.join(values[:5])}" if values else f"no node has label {key}")
    return text + (f" (nodes have {'; '.join(seen)})" if seen else "")


def node_fit(pod: V1Pod, node: V1Node, pods_by_node: Mapping[str, Sequence[V1Pod]] | None) -> NodeFit:
    """`node` against `pod`; `pods_by_node` (None: unknown) gives the free resources."""
    name = node.metadata.name
    tolerations = pod.spec.tolerations or []
    untolerated = [
        taint for taint in (node.spec.taints if node.spec is not None else None) or []
        if taint.effect in _BLOCKING_EFFECTS and not any(_tolerates(t, taint) for t in tolerations)
    ]
    hard = tuple(_taint_text(t) for t in untolerated if not t.key.startswith(_TRANSIENT_TAINT_PREFIX))
    soft = [_taint_text(t) for t in untolerated if t.key.startswith(_TRANSIENT_TAINT_PREFIX)]
    ready, why = _is_ready(node)
    if node.spec is not None and node.spec.unschedulable:
        soft.insert(0, "cordoned")
    if not ready:
        soft.insert(0, f"NotReady ({why})")
    allocatable = {key: parse_quantity(value) for key, value in ((node.status.allocatable if node.status else None)
                                                                 or {}).items()}
    free = None
    if pods_by_node is not None:
        used: dict[str, Decimal] = {}
        for other in pods_by_node.get(name, ()):
            if _same_pod(other, pod) or (other.status is not None and other.status.phase in _GONE_PHASES):
                continue
            _add_to(used, pod_requests(other))
        free = {key: value - used.get(key, Decimal(0)) for key, value in allocatable.items()}
    return NodeFit(name=name, selector_ok=_selector_matches(pod, node), hard_taints=hard,
                    soft_block=", ".join(soft) or None, allocatable=allocatable, free=free)


def _same_pod(a: V1Pod, b: V1Pod) -> bool:
    if a.metadata.uid and b.metadata.uid:
        return a.metadata.uid == b.metadata.uid
    return (a.metadata.name, a.metadata.namespace) == (b.metadata.name, b.metadata.namespace)


_REASON_ITEM = re.compile(r"(\d+) (.+?)(?=, \d+ |$)")


def _scheduler_reasons(message: str) -> tuple[int | None, list[tuple[int, str]]]:
    """("0/4 nodes are available: 2 Insufficient cpu, 2 node(s) had ... . preemption: ...") -> (4, [(2, ...), ...])."""
    main = message.split(" preemption:")[0].strip().rstrip(".")
    total = re.match(r"0/(\d+) nodes are available", main)
    nodes = int(total.group(1)) if total else None
    _, _, tail = main.partition(": ")
    reasons = [(int(n), text.strip()) for n, text in _REASON_ITEM.findall(tail)]
    # Some reasons carry no count ("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims").
    return nodes, reasons or ([(nodes or 0, tail.strip())] if tail.strip() else [])


def _is_permanent_reason(reason: str) -> bool:
    if "didn't match Pod's node affinity/selector" in reason or "didn't match node selector" in reason:
        return True
    taint = re.search(r"taint \{([^:}]+):", reason)
    return taint is not None and not taint.group(1).strip().startswith(_TRANSIENT_TAINT_PREFIX)


def _reason_advice(pod: V1Pod, count: int, reason: str, requests: Mapping[str, Decimal]) -> str | None:
    """Advice for one entry of the scheduler's message, used when no nodes were passed or nodes do not explain it."""
    insufficient = re.match(r"Insufficient (\S+)", reason)
    if insufficient:
        resource = insufficient.group(1)
        need = requests.get(resource)
        needed = f"needs {format_quantity(resource, need)} {resource} per pod; " if need is not None else ""
        return (f"{needed}{count} node(s) lack free {resource}: wait for running pods to finish, lower "
                f"{_values_key(resource)} or add nodes")
    taint = re.search(r"taint \{([^:}]+):\s*([^}]*)\}", reason)
    if taint:
        key, value = taint.group(1).strip(), taint.group(2).strip()
        if key.startswith(_TRANSIENT_TAINT_PREFIX):
            return f"{count} node(s) are {key.removeprefix(_TRANSIENT_TAINT_PREFIX)}: wait or repair them"
        shown = f"{key}={value}" if value else key
        return f"add tolerations for {shown} or choose other nodes ({count} node(s) tainted)"
    if "node affinity/selector" in reason or "node selector" in reason:
        return f"{describe_selector(pod, ())} matches none of {count} node(s): label nodes or change the selector"
    if "were unschedulable" in reason:
        return f"{count} node(s) are cordoned: uncordon them or wait for the maintenance to end"
    if "free ports" in reason:
        return "the worker's host ports are taken (hostNetwork?): give roles sharing nodes distinct guardPort values"
    if "affinity" in reason or "topology spread" in reason:
        return f"pod (anti-)affinity or topology spread rules exclude {count} node(s): relax them or add nodes"
    if "PersistentVolumeClaim" in reason or "volume" in reason:
        return "a volume is not bound or is bound to another zone: check the PVCs and their StorageClass"
    if "Too many pods" in reason:
        return f"{count} node(s) reached their pod limit: wait or add nodes"
    return None


def _largest(fits: Sequence[NodeFit], resource: str, *, free: bool) -> tuple[Decimal, str]:
    values = [((fit.free if free else fit.allocatable) or {}).get(resource, Decimal(0)) for fit in fits]
    best = max(range(len(fits)), key=lambda i: values[i])
    return values[best], fits[best].name


def _needs(resource: str, amount: Decimal) -> str:
    return f"needs {format_quantity(resource, amount)} {resource} per pod"


def _capacity_verdict(requests: Mapping[str, Decimal], candidates: Sequence[NodeFit]) -> _Verdict | None:
    """Fatal verdict when no eligible node's allocatable can ever hold the pod."""
    if any(all(fit.allocatable.get(r, Decimal(0)) >= q for r, q in requests.items()) for fit in candidates):
        return None
    parts = []
    for resource, amount in requests.items():
        largest, node = _largest(candidates, resource, free=False)
        if largest < amount:
            parts.append(f"{_needs(resource, amount)}; no node has more than {format_quantity(resource, largest)} "
                         f"allocatable (node {node}): lower {_values_key(resource)} or add bigger nodes")
    if not parts:
        wanted = ", ".join(f"{format_quantity(r, q)} {r}" for r, q in requests.items())
        parts.append(f"needs {wanted} on one node; no node has all of them allocatable: lower the requests or "
                     "add bigger nodes")
    return _Verdict("; ".join(parts), fatal=True)


def _in_use_advice(requests: Mapping[str, Decimal], fitting: Sequence[NodeFit]) -> str:
    usable = [fit for fit in fitting if fit.soft_block is None]
    blocked = [f"{fit.name} ({fit.soft_block})" for fit in fitting if fit.soft_block is not None]
    parts = []
    if usable and usable[0].free is not None:
        for resource, amount in requests.items():
            largest, node = _largest(usable, resource, free=True)
            if largest < amount:
                parts.append(f"{_needs(resource, amount)}; the largest free on any node is "
                             f"{format_quantity(resource, max(largest, Decimal(0)))} (node {node}): wait for running "
                             f"pods to finish, lower {_values_key(resource)} or add nodes")
    elif usable:
        names = ", ".join(fit.name for fit in usable[:5])
        parts.append(f"nodes {names} have the allocatable for it but other pods use it: wait for them to finish, "
                     "lower the requests or add nodes")
    if blocked:
        parts.append(f"nodes that could host it are unavailable for now: {', '.join(blocked[:5])}")
    return "; ".join(parts)


def _nodes_verdict(pod: V1Pod, nodes: Sequence[V1Node],
                   pods_by_node: Mapping[str, Sequence[V1Pod]] | None) -> tuple[_Verdict | None, str]:
    """A fatal verdict from the nodes, or None and the advice for a pod that fits some node one day."""
    requests = pod_requests(pod)
    fits = [node_fit(pod, node, pods_by_node) for node in nodes]
    candidates = [fit for fit in fits if fit.selector_ok and not fit.hard_taints]
    if not candidates:
        matching = [fit for fit in fits if fit.selector_ok]
        if not matching:
            advice = f"{describe_selector(pod, nodes)} matches no node: label nodes or change the selector"
        else:
            taints = sorted({taint for fit in matching for taint in fit.hard_taints})
            advice = f"add tolerations for {', '.join(taints[:4])} or choose other nodes"
        return _Verdict(advice, fatal=True), ""
    for resource in requests:
        if not any(fit.allocatable.get(resource, Decimal(0)) > 0 for fit in candidates):
            return _Verdict(_not_offered(resource, fits, pod), fatal=True), ""
    capacity = _capacity_verdict(requests, candidates)
    if capacity is not None:
        return capacity, ""
    fitting = [fit for fit in candidates if all(fit.allocatable.get(r, Decimal(0)) >= q for r, q in requests.items())]
    return None, _in_use_advice(requests, fitting)


def _not_offered(resource: str, fits: Sequence[NodeFit], pod: V1Pod) -> str:
    elsewhere = [fit for fit in fits if fit.allocatable.get(resource, Decimal(0)) > 0]
    if not elsewhere:
        if "gpu" in resource:
            return (f"{resource} is not offered by any node: is the device plugin installed? or set resources.gpu 0 "
                    "(or resources.gpuResourceName to the nodes' GPU resource)")
        return f"{resource} is not offered by any node: is its device plugin installed? or drop the request"
    names = ", ".join(fit.name for fit in elsewhere[:4])
    taints = sorted({taint for fit in elsewhere if fit.selector_ok for taint in fit.hard_taints})
    fixes = [f"add tolerations for {', '.join(taints[:4])}"] if taints else []
    if not all(fit.selector_ok for fit in elsewhere):
        fixes.append(f"change {describe_selector(pod, ())}")
    return f"{resource} is only offered by nodes the pod cannot use ({names}): {' or '.join(fixes)}"


def _message_verdict(pod: V1Pod, message: str) -> _Verdict:
    total, reasons = _scheduler_reasons(message)
    requests = pod_requests(pod)
    parts = [advice for count, reason in reasons if (advice := _reason_advice(pod, count, reason, requests))]
    if total == 0 or "no nodes available" in message:
        parts.append("the cluster has no schedulable nodes: add nodes or check that they joined and are Ready")
    permanent = sum(count for count, reason in reasons if _is_permanent_reason(reason))
    fatal = bool(total) and permanent >= (total or 0)
    return _Verdict("; ".join(parts) or "see the scheduler's message", fatal=fatal)


def scheduling_advice(pod: V1Pod, message: str, nodes: Sequence[V1Node] = (),
                      pods_by_node: Mapping[str, Sequence[V1Pod]] | None = None) -> str:
    """Turns the scheduler's FailedScheduling message into what to change, computed from the pod's requests and the
    nodes' allocatable minus the requests of the pods on them (`pods_by_node`, keyed by node name; None: unknown)."""
    return _scheduling_verdict(pod, message, nodes, pods_by_node, ()).advice


def _scheduling_verdict(pod: V1Pod, message: str, nodes: Sequence[V1Node],
                        pods_by_node: Mapping[str, Sequence[V1Pod]] | None,
                        events: Sequence[CoreV1Event]) -> _Verdict:
    from_message = _message_verdict(pod, message)
    if not nodes:
        verdict = from_message
    else:
        fatal_verdict, advice = _nodes_verdict(pod, nodes, pods_by_node)
        if fatal_verdict is not None:
            verdict = fatal_verdict
        else:
            # Obstacles the node arithmetic does not see (ports, pod affinity, volumes) come from the message.
            _, reasons = _scheduler_reasons(message)
            extra = [text for count, reason in reasons
                     if not reason.startswith("Insufficient") and "taint" not in reason and "selector" not in reason
                     and (text := _reason_advice(pod, count, reason, {}))]
            verdict = _Verdict("; ".join(part for part in (advice, *extra) if part) or from_message.advice, fatal=False)
    if verdict.fatal and any(event.reason == "TriggeredScaleUp" for event in events):
        return _Verdict(f"{verdict.advice}; cluster-autoscaler is adding a node, waiting for it", fatal=False)
    return verdict


def _scheduling_problem(pod: V1Pod, nodes: Sequence[V1Node], events: Sequence[CoreV1Event],
                        pods_by_node: Mapping[str, Sequence[V1Pod]] | None) -> Problem | None:
    condition = _condition(pod, "PodScheduled")
    if condition is None or condition.status != "False":
        return None
    if condition.reason == "SchedulingGated":
        gates = ", ".join(gate.name for gate in pod.spec.scheduling_gates or []) or "?"
        return Problem(pod=_name(pod), reason="SchedulingGated", fatal=False,
                       message=condition.message or f"scheduling gates: {gates}",
                       advice=f"waiting for a controller (a queue such as Kueue?) to remove the gates {gates}")
    latest = max((e for e in events if e.reason == "FailedScheduling"), key=lambda e: _event_time(e) or _EPOCH,
                 default=None)
    message = condition.message or (latest.message if latest is not None else "") or "unschedulable"
    verdict = _scheduling_verdict(pod, message, nodes, pods_by_node, events)
    return Problem(pod=_name(pod), reason=condition.reason or "Unschedulable", message=message, fatal=verdict.fatal,
                   advice=verdict.advice)


# ---------------------------------------------------------------------------------------------------------------
# Entry points


def diagnose_pod(
    pod: V1Pod,
    *,
    was_ready: bool = False,
    nodes: Sequence[V1Node] = (),
    events: Sequence[CoreV1Event] = (),
    log_tail: Sequence[str] = (),
    pods_by_node: Mapping[str, Sequence[V1Pod]] | None = None,
    ready_pod: V1Pod | None = None,
    now: datetime | None = None,
) -> Problem | None:
    """Why `pod` is not ready, or None when it is healthy or merely progressing.

    was_ready: the worker was ready once, so a restart lost its engines.
    ready_pod: the pod as last seen ready (implies was_ready). Restarts are then counted from its restartCounts, so a
        crash before readiness is not mistaken for a restart after it, and another uid means the pod was replaced.
    nodes: the cluster's nodes; when given, a bound pod whose node is missing sits on a deleted node.
    events: the pod's events (events of other objects or of an earlier pod with the same name are ignored).
    log_tail: the failing container's last log lines (of the previous instance, `--previous`, once it restarted).
    pods_by_node: pods per node name, to compute free capacity for an unschedulable pod (None: unknown).
    now: the time for the events' ages (default: the current time).
    """
    if pod.status is None:
        return None
    readiness = _Readiness(was_ready or ready_pod is not None, _restart_counts(ready_pod))
    pod_events = _pod_events(pod, events)
    problem = (
        _replaced_problem(pod, ready_pod)
        or _phase_problem(pod, readiness)
        or _disruption_problem(pod)
        or _node_problem(pod, nodes)
        or _deletion_problem(pod, readiness.was_ready)
        or _container_problem_of(pod, readiness)
        or _mount_problem(pod, pod_events)
        or _scheduling_problem(pod, nodes, pod_events, pods_by_node)
    )
    if problem is None:
        return None
    return replace(problem, events=event_lines(pod_events, now=now), log_tail=_tail(log_tail))


def _restart_counts(pod: V1Pod | None) -> dict[str, int]:
    statuses = pod.status.container_statuses if pod is not None and pod.status is not None else None
    return {status.name: status.restart_count or 0 for status in statuses or []}


def _replaced_problem(pod: V1Pod, ready_pod: V1Pod | None) -> Problem | None:
    old, new = (ready_pod.metadata.uid if ready_pod is not None else None), pod.metadata.uid
    if not old or not new or old == new:
        return None
    return Problem(pod=_name(pod), reason="RestartedAfterReady", fatal=True, node=pod.spec.node_name,
                   message=f"the pod was deleted and recreated after the worker was ready (uid {old} -> {new})",
                   advice=_LOST_ENGINES + "; check the events and the old pod's node for why it was deleted")


def summarize_role(problems: Sequence[Problem]) -> str:
    """One message for a failing role: the first fatal problem (else the first) in full, then counts of the others."""
    if not problems:
        return "no problems found"
    first = next((problem for problem in problems if problem.fatal), problems[0])
    others = [problem for problem in problems if problem is not first]
    text = first.render()
    if not others:
        return text
    groups: dict[tuple[str, bool], list[str]] = {}
    for problem in others:
        groups.setdefault((problem.reason, problem.fatal), []).append(problem.pod)
    described = []
    for (reason, fatal), pods in groups.items():
        names = ", ".join(pods[:4]) + (f", +{len(pods) - 4}" if len(pods) > 4 else "")
        described.append(f"{len(pods)} {reason}{'' if fatal else ' (waiting)'} ({names})")
    return text + "\n" + _clip(f"and {len(others)} other worker(s): " + "; ".join(described), 2 * MAX_LINE_CHARS)
