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

from .container_checks import signal_name
from .diagnose import diagnose_pod
from .drains import drain_note
from .nodes import NodeFit, describe_selector, node_fit
from .pod_checks import node_problem
from .problem import MAX_LINE_CHARS, MAX_RENDER_LINES, Problem, event_lines, summarize_role
from .reachability import unreachable_advice
from .resources import format_quantity, pod_requests
from .scheduling import scheduling_advice

__all__ = [
    "MAX_LINE_CHARS",
    "MAX_RENDER_LINES",
    "NodeFit",
    "Problem",
    "describe_selector",
    "diagnose_pod",
    "drain_note",
    "event_lines",
    "format_quantity",
    "node_fit",
    "node_problem",
    "pod_requests",
    "scheduling_advice",
    "signal_name",
    "summarize_role",
    "unreachable_advice",
]
