"""Every reason the adapter gives, in one enumeration: why a worker is not ready (what `diagnose` prints, each a
heading of docs/*/troubleshooting.md) and what the scheduler decided (each the `reason` of its Kubernetes Event,
runtime/events.py). Kubernetes' own reasons that the diagnosis passes through keep Kubernetes' spelling."""

from __future__ import annotations

from enum import Enum


# (str, Enum), not StrEnum: the adapter installs on Python 3.10.
class Reason(str, Enum):
    def __str__(self) -> str:
        return str(self.value)

    # --- images
    ERR_IMAGE_PULL = "ErrImagePull"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    INVALID_IMAGE_NAME = "InvalidImageName"
    ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
    # --- the worker process
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    OOM_KILLED = "OOMKilled"
    ERROR = "Error"
    COMPLETED = "Completed"
    RESTARTED_AFTER_READY = "RestartedAfterReady"
    UNKNOWN = "Unknown"
    CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"
    # --- container configuration
    CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
    CREATE_CONTAINER_ERROR = "CreateContainerError"
    RUN_CONTAINER_ERROR = "RunContainerError"
    START_ERROR = "StartError"
    CONTAINER_CANNOT_RUN = "ContainerCannotRun"
    PRE_START_HOOK_ERROR = "PreStartHookError"
    POST_START_HOOK_ERROR = "PostStartHookError"
    PRE_CREATE_HOOK_ERROR = "PreCreateHookError"
    # --- volumes and the sandbox
    FAILED_MOUNT = "FailedMount"
    FAILED_ATTACH_VOLUME = "FailedAttachVolume"
    FAILED_CREATE_POD_SANDBOX = "FailedCreatePodSandBox"
    PROBE_FAILING = "ProbeFailing"
    # --- scheduling
    UNSCHEDULABLE = "Unschedulable"
    SCHEDULING_GATED = "SchedulingGated"
    # --- nodes, evictions and preemption
    NODE_NOT_READY = "NodeNotReady"
    NODE_GONE = "NodeGone"
    EVICTED = "Evicted"
    PREEMPTED = "Preempted"
    DISRUPTED = "Disrupted"
    TERMINATING = "Terminating"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    OUT_OF_CPU = "OutOfcpu"
    OUT_OF_MEMORY = "OutOfmemory"
    SHUTDOWN = "Shutdown"
    TERMINATED = "Terminated"
    NODE_SHUTDOWN = "NodeShutdown"
    NODE_AFFINITY = "NodeAffinity"
    FAILED = "Failed"

    # --- the scheduler's decisions (Events)
    REVISION_WRITTEN = "RevisionWritten"
    RELEASE_UNINSTALLED = "ReleaseUninstalled"
    WORKER_FAILED = "WorkerFailed"  # a failure the diagnosis has no reason of the above for (Kueue's verdicts)
    ROLLED_BACK = "RolledBack"
    ROLLBACK_SKIPPED = "RollbackSkipped"
    STUCK_PODS_REPLACED = "StuckPodsReplaced"
    LEASE_TAKEN_OVER = "LeaseTakenOver"
    RELEASE_REAPED = "ReleaseReaped"
    REAP_FAILED = "ReapFailed"
    CHANGE_REFUSED = "ChangeRefused"


DECISIONS = frozenset(
    {
        Reason.REVISION_WRITTEN,
        Reason.RELEASE_UNINSTALLED,
        Reason.WORKER_FAILED,
        Reason.ROLLED_BACK,
        Reason.ROLLBACK_SKIPPED,
        Reason.STUCK_PODS_REPLACED,
        Reason.LEASE_TAKEN_OVER,
        Reason.RELEASE_REAPED,
        Reason.REAP_FAILED,
        Reason.CHANGE_REFUSED,
    }
)
DIAGNOSES = frozenset(Reason) - DECISIONS


def diagnosis_reason(text: str) -> Reason | None:
    """The member named `text` as the diagnosis writes it ("OOMKilled"), or None for a reason it passes through
    unknown (a kubelet's reason of a newer Kubernetes)."""
    try:
        return Reason(text)
    except ValueError:
        return None
