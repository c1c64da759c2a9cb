"""The trainer as a batch/v1 Job, built as plain data: the controller ServiceAccount of rbac/, the label the
chart's NetworkPolicy admits (`areal.io/controller: "true"`), the AREAL_K8S_* settings that tie the workers'
lives to it (the pod's own name and uid, which its workers' objects get as ownerReference, and the lease grace),
and the chart's securityContexts, so the pod passes PodSecurity `restricted` as the workers' do."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from ..config import BUNDLED_CHART
from ..errors import InputError, refuse_unknown_fields
from . import metrics as trainer_metrics, network
from .env import check_env, env_var

CONTROLLER_LABEL = "areal.io/controller"
# The labels the Job controller puts on its pods (Kubernetes >= 1.27): the Job's name and uid, for the downward API.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
CONTROLLER_SERVICE_ACCOUNT = "areal-controller"  # rbac/serviceaccount.yaml
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
LAUNCHER = ["-m", "areal_workers.launch"]
# What the bundled chart gives its workers by default (its values.yaml, read, not copied): the trainer runs as they
# do, so it passes PodSecurity `restricted` in their namespace and shares their USER.
WORKER_DEFAULTS: dict[str, Any] = yaml.safe_load((BUNDLED_CHART / "values.yaml").read_text())["workerDefaults"]
POD_SECURITY_CONTEXT: dict[str, Any] = WORKER_DEFAULTS["podSecurityContext"]
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = WORKER_DEFAULTS["containerSecurityContext"]
# Submit file field -> the Kubernetes type it holds (its keys are checked against it) and the default it is merged on.
SECURITY_CONTEXTS: dict[str, tuple[Any, dict[str, Any]]] = {
    "pod_security_context": (client.V1PodSecurityContext, POD_SECURITY_CONTEXT),
    "container_security_context": (client.V1SecurityContext, CONTAINER_SECURITY_CONTEXT),
}
# A uid the image may not know has no home directory: helm (run by the adapter) keeps its cache and configuration
# under HOME, as the chart's reaper CronJob does for its uid 1000.
HOME = "/tmp"
# AReaL keys its name_resolve records by getpass.getuser(), which reads USER (and fails for a uid without a passwd
# entry when it is unset): the trainer gets the workers' user, so both sides read and write the same records.
USER: str = WORKER_DEFAULTS["env"]["USER"]


@dataclass
class TrainerSpec:
    """What a submit file holds (every field optional but image): the trainer pod's settings."""

    image: str = ""
    name: str = ""  # the Job's name (default: from the command)
    service_account: str = CONTROLLER_SERVICE_ACCOUNT
    cpu: str = "2"
    memory: str = "8Gi"
    gpu: int = 0
    # NAME: a literal value, or a key of a Secret or ConfigMap of the namespace ({secretKeyRef: {name, key,
    # optional}} or {configMapKeyRef: ...}), which the Job then references instead of holding the value.
    env: dict[str, Any] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    working_dir: str = ""
    lease_grace_seconds: int = 300
    # Attempts after the first when the trainer fails (its pod ends non-zero, is deleted, evicted or OOM-killed):
    # AReaL's recover.retries default. Each attempt is a new pod that reclaims the workers (restarted in place).
    restarts: int = 3
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int = 3600
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)  # camelCase Kubernetes Tolerations
    image_pull_secrets: list[str] = field(default_factory=list)
    launcher: bool = True  # run `python SCRIPT` / `python -m MODULE` through areal_workers.launch
    # The pod's and the container's securityContext (camelCase Kubernetes fields). In a submit file each is merged
    # over these defaults as Helm merges values: a key replaces the default's, null removes it, a null field
    # removes the securityContext.
    pod_security_context: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(POD_SECURITY_CONTEXT))
    container_security_context: dict[str, Any] = field(
        default_factory=lambda: copy.deepcopy(CONTAINER_SECURITY_CONTEXT)
    )
    # The trainer pod's NetworkPolicy (trainer/network.py): enabled, apiserver (IP:port list; empty: found by
    # submit), egress (more NetworkPolicy egress rules).
    network_policy: dict[str, Any] = field(default_factory=lambda: network.settings({}, None))
    # The scheduler's Prometheus metrics (trainer/metrics.py): enabled, port, annotations, scrapers, pod_monitor,
    # pod_monitor_labels, interval.
    metrics: dict[str, Any] = field(default_factory=lambda: trainer_metrics.settings({}, None))


def _merged(default: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` over `default` as Helm merges values: mappings key by key, null removes a key."""
    merged = copy.deepcopy(default)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def _unknown_keys(data: dict[str, Any], model: Any, path: str) -> list[str]:
    """The keys of `data`, nested ones too, that the Kubernetes type `model` has no field for: the apiserver would
    drop them with a warning, and a misspelt `runAsUser` would leave the default in place unnoticed."""
    kinds = {name: model.openapi_types[attribute] for attribute, name in model.attribute_map.items()}
    unknown = []
    for key, value in data.items():
        if key not in kinds:
            unknown.append(f"{path}.{key}")
        elif isinstance(value, dict) and hasattr(client, kinds[key]):
            unknown += _unknown_keys(value, getattr(client, kinds[key]), f"{path}.{key}")
    return unknown


def _security_context(name: str, value: Any, where: Path | None) -> dict[str, Any]:
    """A submit file's `pod_security_context` or `container_security_context` over its default."""
    model, default = SECURITY_CONTEXTS[name]
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(
            f"{where}: {name} is a mapping of {model.__name__.removeprefix('V1')} fields (camelCase, e.g. "
            f"runAsUser: 2000), merged over the default; null removes it"
        )
    unknown = _unknown_keys(value, model, name)
    if unknown:
        known = ", ".join(sorted(model.attribute_map.values()))
        raise InputError(
            f"{where}: unknown field(s) {', '.join(unknown)}; {name} has {known} (Kubernetes' "
            f"{model.__name__.removeprefix('V1')}, camelCase)"
        )
    return _merged(default, value)


def _check_tolerations(value: Any, where: Path | None) -> None:
    example = "e.g. [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]"
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise InputError(f"{where}: tolerations is a list of Kubernetes Tolerations ({example})")
    unknown = [key for item in value for key in _unknown_keys(item, client.V1Toleration, "tolerations[]")]
    if unknown:
        known = ", ".join(sorted(client.V1Toleration.attribute_map.values()))
        raise InputError(f"{where}: unknown field(s) {', '.join(unknown)}; a toleration has {known}")


def load_spec(path: Path | None, overrides: dict[str, Any]) -> TrainerSpec:
    """A submit file (YAML mapping of TrainerSpec fields, in snake_case) under the command line's overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise InputError(f"cannot read submit file {path}: {error}") from None
        if not isinstance(data, dict):
            raise InputError(f"{path}: a submit file is a mapping of trainer settings")
    refuse_unknown_fields(data, sorted(f.name for f in fields(TrainerSpec)), path, "a submit file")
    for name in SECURITY_CONTEXTS:
        if name in data:
            data[name] = _security_context(name, data[name], path)
    if "tolerations" in data:
        _check_tolerations(data["tolerations"], path)
    if "env" in data:
        data["env"] = check_env(data["env"], path)
    overrides = dict(overrides)
    if overrides.get("env"):  # the command line's entries over the file's, name by name
        data["env"] = {**(data.get("env") or {}), **overrides.pop("env")}
    if "network_policy" in data:
        data["network_policy"] = network.settings(data["network_policy"], path)
    if "metrics" in data:
        data["metrics"] = trainer_metrics.settings(data["metrics"], path)
    spec = TrainerSpec(**{**data, **{k: v for k, v in overrides.items() if v not in (None, {}, [])}})
    if not spec.image:
        raise InputError(
            "the trainer needs an image (image: in the submit file, or --image): one with AReaL, areal-workers and helm"
        )
    if spec.lease_grace_seconds < 0:
        raise InputError("lease_grace_seconds must be >= 0")
    if not isinstance(spec.restarts, int) or isinstance(spec.restarts, bool) or spec.restarts < 0:
        raise InputError(f"restarts must be an integer >= 0 (0: one attempt), got {spec.restarts!r}")
    if spec.restarts and not spec.lease_grace_seconds:
        raise InputError(
            "restarts need the trainer's Lease (lease_grace_seconds > 0): a restarted trainer takes its "
            "predecessor's Lease to know it is dead before it reclaims the workers"
        )
    return spec


def job_name(spec: TrainerSpec, command: list[str]) -> str:
    if spec.name:
        if not NAME.match(spec.name) or len(spec.name) > 52:
            raise InputError(
                f"name {spec.name!r} must be a DNS label of at most 52 characters (lowercase letters, digits, '-')"
            )
        return spec.name
    scripts = [Path(word).stem for word in command if word.endswith(".py")]
    modules = [command[i + 1].rsplit(".", 1)[-1] for i, word in enumerate(command[:-1]) if word == "-m"]
    slug = re.sub(r"[^a-z0-9]+", "-", (scripts or modules or command)[0].lower()).strip("-")[:30] or "trainer"
    return f"trainer-{slug}"


def launched(command: list[str]) -> list[str]:
    """`python [options] SCRIPT ...` and `python [options] -m MODULE ...` through `python -m areal_workers.launch`,
    so an unmodified AReaL entry point gets the Kubernetes scheduler; any other command as it is."""
    if not command or not PYTHON.match(Path(command[0]).name):
        return list(command)
    options = 1
    while options < len(command) and command[options].startswith("-") and command[options] not in ("-m", "-c"):
        options += 1
    head, rest = command[:options], command[options:]
    if not rest or rest[0] == "-c" or rest[:2] == LAUNCHER or (rest[0] == "-m" and len(rest) < 2):
        return list(command)
    return [*head, *LAUNCHER, *rest]


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _template_metadata(labels: dict[str, str], metrics: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": {**labels, CONTROLLER_LABEL: "true"}}
    if annotations := trainer_metrics.pod_annotations(metrics):
        metadata["annotations"] = annotations
    return metadata


def _owner_env(restarts: int) -> list[dict[str, Any]]:
    """What the workers' objects are owned by: the trainer's pod (they go with it), or with restarts its Job (they
    outlive an attempt, the next one reclaims them)."""
    if not restarts:
        return [
            _field_env("AREAL_K8S_OWNER_POD", "metadata.name"),
            _field_env("AREAL_K8S_OWNER_POD_UID", "metadata.uid"),
        ]
    return [
        _field_env("AREAL_K8S_OWNER_JOB", f"metadata.labels['{JOB_NAME_LABEL}']"),
        _field_env("AREAL_K8S_OWNER_JOB_UID", f"metadata.labels['{JOB_UID_LABEL}']"),
    ]


def trainer_job(spec: TrainerSpec, command: list[str], namespace: str) -> dict[str, Any]:
    if not command:
        raise InputError(
            "nothing to run: give the trainer's command after --, e.g. -- python train.py --config gsm8k.yaml"
        )
    name = job_name(spec, command)
    labels = {
        "app.kubernetes.io/name": "areal-trainer",
        "app.kubernetes.io/part-of": "areal",
        "app.kubernetes.io/component": "trainer",
    }
    env = [
        _field_env("AREAL_K8S_NAMESPACE", "metadata.namespace"),
        *_owner_env(spec.restarts),
        # Narrows the release's NetworkPolicies to this trainer's pods (KubernetesSchedulerConfig.trainer_job).
        _field_env("AREAL_K8S_TRAINER_JOB", f"metadata.labels['{JOB_NAME_LABEL}']"),
        {"name": "AREAL_K8S_LEASE_GRACE_SECONDS", "value": str(spec.lease_grace_seconds)},
    ]
    if "AREAL_K8S_TRAINER_ADDRESS" not in spec.env:  # the callbacks' address: the pod's, not the host name's
        env.append(_field_env("AREAL_K8S_TRAINER_ADDRESS", "status.podIP"))
    if "AREAL_K8S_METRICS_ADDRESS" not in spec.env:
        env += trainer_metrics.address_env(spec.metrics)
    env += [env_var(key, value) for key, value in sorted(spec.env.items())]
    uid = {**spec.pod_security_context, **spec.container_security_context}.get("runAsUser")
    if uid not in (None, 0) and "HOME" not in spec.env:
        env.append({"name": "HOME", "value": HOME})
    if "USER" not in spec.env:
        env.append({"name": "USER", "value": USER})
    resources: dict[str, Any] = {"cpu": spec.cpu, "memory": spec.memory}
    if spec.gpu:
        resources["nvidia.com/gpu"] = spec.gpu
    container: dict[str, Any] = {
        "name": "trainer",
        "image": spec.image,
        "command": launched(command) if spec.launcher else list(command),
        "env": env,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
    }
    if ports := trainer_metrics.container_ports(spec.metrics):
        container["ports"] = ports
    if spec.volume_mounts:
        container["volumeMounts"] = spec.volume_mounts
    if spec.working_dir:
        container["workingDir"] = spec.working_dir
    if spec.container_security_context:
        container["securityContext"] = spec.container_security_context
    pod: dict[str, Any] = {
        "serviceAccountName": spec.service_account,
        "restartPolicy": "Never",
    }
    if spec.pod_security_context:
        pod["securityContext"] = spec.pod_security_context
    pod["containers"] = [container]
    for key, value in (
        ("volumes", spec.volumes),
        ("nodeSelector", spec.node_selector),
        ("tolerations", spec.tolerations),
        ("imagePullSecrets", [{"name": secret} for secret in spec.image_pull_secrets]),
    ):
        if value:
            pod[key] = value
    job_spec: dict[str, Any] = {
        # Each failed attempt is followed by a new pod, up to `restarts`; it takes over its predecessor's Lease and
        # reclaims the workers, restarted in place (docs/en/trainer-lifetime.md).
        "backoffLimit": spec.restarts,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "template": {"metadata": _template_metadata(labels, spec.metrics), "spec": pod},
    }
    if spec.restarts:
        # The next attempt only once the last one's pod is gone: a terminating trainer still renews its Lease, and
        # the next one would be refused as a second live controller of the trial.
        job_spec["podReplacementPolicy"] = "Failed"
    if spec.active_deadline_seconds:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": job_spec,
    }
