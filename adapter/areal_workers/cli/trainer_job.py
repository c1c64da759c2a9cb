"""The trainer as a batch/v1 Job, built as plain data: the controller ServiceAccount of rbac/, the label the
chart's NetworkPolicy admits (`areal.io/controller: "true"`), and the AREAL_K8S_* settings that tie the workers'
lives to it: the pod's own name and uid (its workers' objects get it as ownerReference) and the lease grace."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .session import EXIT_USAGE, CliError

CONTROLLER_LABEL = "areal.io/controller"
CONTROLLER_SERVICE_ACCOUNT = "areal-controller"  # rbac/serviceaccount.yaml
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
LAUNCHER = ["-m", "areal_workers.launch"]


@dataclass
class TrainerSpec:
    """What a submit file holds (every field optional but image): the trainer pod's settings."""

    image: str = ""
    name: str = ""  # the Job's name (default: from the command)
    service_account: str = CONTROLLER_SERVICE_ACCOUNT
    cpu: str = "2"
    memory: str = "8Gi"
    gpu: int = 0
    env: dict[str, str] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    working_dir: str = ""
    lease_grace_seconds: int = 300
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int = 3600
    node_selector: dict[str, str] = field(default_factory=dict)
    image_pull_secrets: list[str] = field(default_factory=list)
    launcher: bool = True  # run `python SCRIPT` / `python -m MODULE` through areal_workers.launch


def load_spec(path: Path | None, overrides: dict[str, Any]) -> TrainerSpec:
    """A submit file (YAML mapping of TrainerSpec fields, in snake_case) under the command line's overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise CliError(f"cannot read submit file {path}: {error}", EXIT_USAGE) from None
        if not isinstance(data, dict):
            raise CliError(f"{path}: a submit file is a mapping of trainer settings", EXIT_USAGE)
    known = {f.name for f in fields(TrainerSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise CliError(
            f"{path}: unknown field(s) {', '.join(unknown)}; a submit file has {', '.join(sorted(known))}", EXIT_USAGE
        )
    spec = TrainerSpec(**{**data, **{k: v for k, v in overrides.items() if v not in (None, {}, [])}})
    if not spec.image:
        raise CliError(
            "the trainer needs an image (image: in the submit file, or --image): one with AReaL, "
            "areal-workers and helm",
            EXIT_USAGE,
        )
    if spec.lease_grace_seconds < 0:
        raise CliError("lease_grace_seconds must be >= 0", EXIT_USAGE)
    return spec


def job_name(spec: TrainerSpec, command: list[str]) -> str:
    if spec.name:
        if not NAME.match(spec.name) or len(spec.name) > 52:
            raise CliError(
                f"name {spec.name!r} must be a DNS label of at most 52 characters (lowercase letters, digits, '-')",
                EXIT_USAGE,
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


def trainer_job(spec: TrainerSpec, command: list[str], namespace: str) -> dict[str, Any]:
    if not command:
        raise CliError(
            "nothing to run: give the trainer's command after --, e.g. -- python train.py --config gsm8k.yaml",
            EXIT_USAGE,
        )
    name = job_name(spec, command)
    labels = {
        "app.kubernetes.io/name": "areal-trainer",
        "app.kubernetes.io/part-of": "areal",
        "app.kubernetes.io/component": "trainer",
    }
    env = [
        _field_env("AREAL_K8S_NAMESPACE", "metadata.namespace"),
        _field_env("AREAL_K8S_OWNER_POD", "metadata.name"),
        _field_env("AREAL_K8S_OWNER_POD_UID", "metadata.uid"),
        {"name": "AREAL_K8S_LEASE_GRACE_SECONDS", "value": str(spec.lease_grace_seconds)},
    ]
    env += [{"name": key, "value": str(value)} for key, value in sorted(spec.env.items())]
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
    if spec.volume_mounts:
        container["volumeMounts"] = spec.volume_mounts
    if spec.working_dir:
        container["workingDir"] = spec.working_dir
    pod: dict[str, Any] = {
        "serviceAccountName": spec.service_account,
        "restartPolicy": "Never",
        "containers": [container],
    }
    for key, value in (
        ("volumes", spec.volumes),
        ("nodeSelector", spec.node_selector),
        ("imagePullSecrets", [{"name": secret} for secret in spec.image_pull_secrets]),
    ):
        if value:
            pod[key] = value
    job_spec: dict[str, Any] = {
        # One attempt: a second trainer pod would start the trial over with new workers (the first's are
        # garbage-collected with it); rerun it on purpose instead.
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "template": {"metadata": {"labels": {**labels, CONTROLLER_LABEL: "true"}}, "spec": pod},
    }
    if spec.active_deadline_seconds:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": job_spec,
    }
