"""AReaL's Job / SchedulingSpec -> values of charts/areal-workers, as pure functions (no cluster, no helm).

Nothing here mutates its inputs; every rejection says what to change and happens before anything is written.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import shlex
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from .. import naming
from ..areal_types import Job, SchedulingSpec
from ..config import KubernetesSchedulerConfig
from ..naming import role_problem
from .image_reference import image_reference_problem, shown, split_image

DEFAULT_COMMAND = "python -m areal.infra.rpc.rpc_server"
# What a Job with no tasks gets (AReaL's LocalScheduler uses cpu=1, gpu=0, port_count=2 and the rpc_server);
# memory is in GiB here and 1 GiB is the smallest sensible worker.
DEFAULT_TASK: dict[str, Any] = {"cpu": 1, "gpu": 0, "mem": 1, "port_count": 2, "cmd": DEFAULT_COMMAND}
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
MAX_PORTS = 101  # the guard and the chart's extraPorts maximum of 100
NAME_RESOLVE_TYPES = ("nfs", "etcd3")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# Variables the chart sets from the pod and the role (its worker identity); a role may not override them.
RESERVED_ENV = frozenset(
    {
        "POD_NAME",
        "POD_NAMESPACE",
        "POD_IP",
        "AREAL_WORKER_INDEX",
        "AREAL_EXPERIMENT_NAME",
        "AREAL_TRIAL_NAME",
        "AREAL_ROLE",
        "AREAL_WORKER_ID",
    }
)

# Slurm-only SchedulingSpec fields, each with the Kubernetes way to get the same effect. ray_placement_strategy is
# not among them: AReaL's RolloutController sets it to "separate" on every rollout job, and AReaL's Local and Slurm
# schedulers ignore it, as this one does (docs/en/decisions.md).
SLURM_ONLY = {
    "nodelist": "choose nodes with KubernetesSchedulerConfig.node_selector or the chart's "
    "workerDefaults.nodeSelector / affinity (values_files)",
    "exclude": "keep workers off nodes with a node affinity NotIn rule or taints in the chart's values (values_files)",
    "srun_additional_args": "there is no srun on Kubernetes; set pod options through the chart's values (values_files)",
    "mount": "mount storage with the chart's workerDefaults.extraVolumes and extraVolumeMounts (values_files)",
    # AReaL after 2.0.0 (areal-project/AReaL#1584): checked when the spec has the field, ignored when it has not.
    "reservation": "Kubernetes has no reservations; hold capacity for the workers with a Kueue queue "
    "(KubernetesSchedulerConfig.kueue_queue) or dedicated nodes (taints, tolerations and nodeSelector in the "
    "chart's values, values_files)",
}
EXCLUSIVE_ALTERNATIVE = (
    "Kubernetes cannot keep every other pod off a node; to keep a role's nodes to itself, set the chart's "
    "roles.<role>.exclusiveTopology (all its workers in one domain of that node label, no other worker there) or "
    "dedicate nodes with taints and tolerations (values_files), and leave exclusive False"
)


class TopologyError(ValueError):
    """A Job cannot become chart values. Carries AReaL's WorkerCreationError fields."""

    def __init__(self, worker_key: str, reason: str, details: str = "") -> None:
        super().__init__(f"{worker_key}: {reason}" + (f" ({details})" if details else ""))
        self.worker_key, self.reason, self.details = worker_key, reason, details


def _spec_defaults(spec: SchedulingSpec | None = None) -> dict[str, Any]:
    """The field defaults of `spec`'s own dataclass (AReaL's of whichever version built it), else SchedulingSpec's."""
    kind = type(spec) if spec is not None and dataclasses.is_dataclass(spec) else SchedulingSpec
    return {
        f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
        for f in dataclasses.fields(kind)
    }


def resolve_spec(job: Job) -> SchedulingSpec:
    """The one SchedulingSpec of a role: a StatefulSet has one pod template, so specs must not differ per worker."""
    role, replicas, tasks = job.role, job.replicas, list(job.tasks or [])
    problem = role_problem(role)
    if problem:
        raise TopologyError(str(role), "Invalid role name", problem)
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise TopologyError(role, "Invalid configuration", f"replicas must be an integer, got {replicas!r}")
    if replicas == 0:
        raise TopologyError(role, "Invalid configuration", "replicas must be greater than 0")
    if replicas < 0:
        raise TopologyError(role, "Invalid configuration", f"replicas must be greater than 0, got {replicas}")
    if not tasks:
        return SchedulingSpec(**DEFAULT_TASK)
    if len(tasks) not in (1, replicas):
        raise TopologyError(
            role,
            "Invalid configuration",
            f"schedulings length ({len(tasks)}) must be 1 or equal to replicas ({replicas})",
        )
    first = tasks[0]
    different = [i for i, task in enumerate(tasks) if task != first]
    if different:
        raise TopologyError(
            role,
            "Invalid configuration",
            f"workers {different} have a SchedulingSpec different from worker 0; a role is one "
            f"StatefulSet with one pod template: give all workers the same spec or split the role",
        )
    return first


def check_spec(role: str, spec: SchedulingSpec) -> None:
    """Rejects what Kubernetes cannot do, naming the Kubernetes alternative."""
    defaults = _spec_defaults(spec)
    for name, alternative in SLURM_ONLY.items():
        value = getattr(spec, name, None)  # fields an older AReaL's SchedulingSpec lacks are not set
        if value not in (None, "", defaults.get(name)):
            raise TopologyError(role, f"SchedulingSpec.{name} is Slurm-only", f"got {value!r}; {alternative}")
    exclusive = getattr(spec, "exclusive", False)  # AReaL after 2.0.0 (#1584): sbatch --exclusive
    if exclusive not in (False, None):
        raise TopologyError(
            role,
            "SchedulingSpec.exclusive is not supported on Kubernetes",
            f"got {exclusive!r}; {EXCLUSIVE_ALTERNATIVE}",
        )
    if spec.task_type != "worker":
        raise TopologyError(
            role,
            "Unsupported task_type",
            f"task_type {spec.task_type!r}: the Kubernetes scheduler starts 'worker' tasks; "
            f"engines are created on workers with create_engine",
        )
    for name in ("cpu", "gpu", "mem", "port_count"):
        value = getattr(spec, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise TopologyError(
                role, "Invalid resources", f"SchedulingSpec.{name} must be a number >= 0, got {value!r}"
            )
    if spec.cpu <= 0:
        raise TopologyError(role, "Invalid resources", f"SchedulingSpec.cpu must be > 0, got {spec.cpu}")
    if spec.mem <= 0:
        raise TopologyError(role, "Invalid resources", f"SchedulingSpec.mem (GiB) must be > 0, got {spec.mem}")
    if int(spec.gpu) != spec.gpu:
        raise TopologyError(role, "Invalid resources", f"SchedulingSpec.gpu must be a whole number, got {spec.gpu}")
    if not 1 <= spec.port_count <= MAX_PORTS:
        raise TopologyError(
            role,
            "Invalid configuration",
            f"SchedulingSpec.port_count must be within 1..{MAX_PORTS} (the first port is the guard), "
            f"got {spec.port_count}",
        )
    split_command(role, spec.cmd)
    if spec.cmd and "--port" in spec.cmd:
        raise TopologyError(
            role,
            "Custom command should not include --port argument",
            "The scheduler automatically allocates and provides the port.",
        )
    for key in spec.env_vars or {}:
        if not ENV_NAME.match(key):
            raise TopologyError(role, "Invalid env_vars", f"{key!r} is not a valid environment variable name")
        if key in RESERVED_ENV:
            raise TopologyError(
                role, "Invalid env_vars", f"{key} is set by the chart from the pod itself; use another name"
            )
    if spec.image != defaults["image"]:
        image_problem(role, spec.image)


def image_problem(role: str, image: str) -> None:
    """Rejects an image the kubelet cannot pull or the chart cannot render back (see `image_reference_problem`)."""
    if not image or not isinstance(image, str):
        raise TopologyError(
            role,
            "Invalid image",
            "SchedulingSpec.image is empty; set a container image "
            "(e.g. ghcr.io/inclusionai/areal-runtime:v1.0.4) or KubernetesSchedulerConfig.image",
        )
    if image.endswith(".sif") or image.startswith("/"):
        raise TopologyError(
            role,
            "Apptainer images are Slurm-only",
            f"{image!r} is a file path; Kubernetes pulls container images: set SchedulingSpec.image "
            f"or KubernetesSchedulerConfig.image to e.g. ghcr.io/inclusionai/areal-runtime:v1.0.4",
        )
    if any(c.isspace() for c in image) or image != image.strip():
        raise TopologyError(role, "Invalid image", f"{image!r} contains whitespace")
    problem = image_reference_problem(image)
    if problem:
        raise TopologyError(role, "Invalid image", f"{shown(image, 300)} is not a container image reference: {problem}")


def split_command(role: str, cmd: str | None) -> list[str]:
    """`cmd` as argv, split as a POSIX shell would; one shlex cannot split (an unbalanced quote, a trailing
    backslash) is refused as TopologyError, so it reaches AReaL as WorkerCreationError before anything is written."""
    try:
        return shlex.split(cmd or "")
    except ValueError as error:
        raise TopologyError(
            role,
            "Invalid command",
            f"SchedulingSpec.cmd {cmd!r} cannot be split into arguments as a shell would: {error} (an unbalanced "
            f"quote, or a backslash at the end): close the quote or escape it (\\' or \\\")",
        ) from None


def worker_command(spec: SchedulingSpec, python_executable: str) -> list[str]:
    """spec.cmd as argv; a controller-side interpreter path (AReaL may put sys.executable there) means 'python'
    in the image, which is config.python_executable."""
    argv = split_command("SchedulingSpec.cmd", spec.cmd or DEFAULT_COMMAND)
    if (
        argv
        and PurePosixPath(argv[0]).name.startswith("python")
        and ("/" in argv[0] or argv[0] in ("python", "python3"))
    ):
        argv[0] = python_executable
    return argv


def role_values(spec: SchedulingSpec, replicas: int, config: KubernetesSchedulerConfig) -> dict[str, Any]:
    """`roles.<role>` of the chart for one AReaL role."""
    env = {name: str(max(1, int(spec.cpu))) for name in THREAD_VARIABLES}  # thread counts are whole numbers
    env.update({key: str(value) for key, value in (spec.env_vars or {}).items()})
    values: dict[str, Any] = {
        "replicas": replicas,
        "command": worker_command(spec, config.python_executable),
        "env": env,
        "resources": {"cpu": _number(spec.cpu), "memory": f"{_number(spec.mem)}Gi", "gpu": int(spec.gpu)},
        "extraPorts": int(spec.port_count) - 1,
    }
    if spec.additional_bash_cmds:
        values["setupCommands"] = list(spec.additional_bash_cmds)
    if spec.image != _spec_defaults(spec)["image"]:
        values["image"] = split_image(spec.image)
    return values


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def base_values(
    config: KubernetesSchedulerConfig,
    experiment: str,
    trial: str,
    cluster: Mapping[str, Any] | None = None,
    offload: bool = False,
) -> dict[str, Any]:
    """Release-wide values: names, image, guard port, name-resolve settings, pod options from the config, and
    AReaL's enable_offload (torch_memory_saver preloaded into every worker, as AReaL's schedulers do)."""
    values: dict[str, Any] = {"experiment": experiment, "trial": trial, "guard": {"port": config.guard_port}}
    if config.image:
        image_problem("KubernetesSchedulerConfig.image", config.image)
    image: dict[str, Any] = split_image(config.image) if config.image else {}
    if config.image_pull_policy:
        image["pullPolicy"] = config.image_pull_policy
    if config.image_pull_secrets:
        image["pullSecrets"] = list(config.image_pull_secrets)
    if image:
        values["image"] = image
    defaults: dict[str, Any] = {}
    if config.node_selector:
        defaults["nodeSelector"] = dict(config.node_selector)
    if config.termination_grace_seconds is not None:
        defaults["terminationGracePeriodSeconds"] = config.termination_grace_seconds
    if offload:
        defaults["offload"] = {"enabled": True}
    if config.kueue_queue:
        defaults["kueue"] = {"queueName": config.kueue_queue, "priorityClass": config.kueue_priority_class or ""}
    if defaults:
        values["workerDefaults"] = defaults
    if config.service_account:
        values["serviceAccount"] = {"create": False, "name": config.service_account}
    if cluster:
        values["cluster"] = copy.deepcopy(dict(cluster))
    if config.owner_pod:  # the trainer runs in a pod: its workers go with it (garbage collection)
        values["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": config.owner_pod, "uid": config.owner_pod_uid}
        ]
    elif config.owner_job:  # a Job that restarts its trainer: the workers outlive an attempt, not the Job
        values["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": config.owner_job, "uid": config.owner_job_uid}
        ]
    if config.trainer_job:  # ANDed with the values files' controller selector: this trainer's pods, no other's
        selector = {"matchLabels": {naming.LABEL_JOB_NAME: config.trainer_job}}
        values["networkPolicy"] = {"controller": {"podSelector": selector}}
    return values


def cluster_values(exp_config: Any) -> dict[str, Any]:
    """The chart's `cluster` block from AReaL's experiment config (cluster.fileroot, cluster.name_resolve)."""
    cluster = getattr(exp_config, "cluster", None)
    if cluster is None:
        return {}
    values: dict[str, Any] = {}
    if getattr(cluster, "fileroot", None):
        values["fileroot"] = str(cluster.fileroot)
    name_resolve = getattr(cluster, "name_resolve", None)
    if name_resolve is not None:
        resolve = {
            "type": getattr(name_resolve, "type", None),
            "nfsRecordRoot": getattr(name_resolve, "nfs_record_root", None),
            "etcd3Addr": getattr(name_resolve, "etcd3_addr", None),
        }
        values["nameResolve"] = {k: str(v) for k, v in resolve.items() if v}
        kind = values["nameResolve"].get("type")
        if kind is not None and kind not in NAME_RESOLVE_TYPES:
            raise TopologyError(
                "cluster.name_resolve",
                f"name_resolve type {kind!r} does not work on Kubernetes",
                f"use one of {', '.join(NAME_RESOLVE_TYPES)}: workers in pods reach an NFS path or "
                f"an etcd3 server, not the controller's Ray cluster",
            )
    return values
