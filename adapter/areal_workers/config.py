"""KubernetesSchedulerConfig: everything the scheduler needs besides AReaL's experiment config."""

from __future__ import annotations

import difflib
import importlib.util
import ipaddress
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

from . import naming
from .log_format import LOG_FORMATS, LogFormat

BUNDLED_CHART = Path(__file__).resolve().parent / "chart"

ForkMode = Literal["process", "pod"]
ReleaseOwnership = Literal["managed", "external"]
CapacityCheck = Literal["reject", "warn", "off"]
PULL_POLICIES = ("Always", "IfNotPresent", "Never")

# The namespace when AREAL_K8S_NAMESPACE is unset; then the pod's own (SERVICE_ACCOUNT_NAMESPACE_FILE).
NAMESPACE_FALLBACK_VARIABLE = "KUBERNETES_NAMESPACE"


# Where a process inside a pod learns its namespace (mounted with the service account token).
SERVICE_ACCOUNT_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
CAPACITY_CHECKS = ("reject", "warn", "off")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the value and what to change."""


@dataclass(frozen=True)
class KubernetesSchedulerConfig:
    """How the scheduler reaches the cluster and what it deploys.

    Attributes:
        namespace: namespace of the release and its workers.
        kubeconfig: kubeconfig file with the cluster credentials (None: the in-cluster service account, else
            $KUBECONFIG or ~/.kube/config).
        context: context of the kubeconfig to use (None: its current context).
        chart: chart directory, packaged chart, `repo/name` or `oci://` reference; default: the chart in this wheel.
        chart_version / chart_repo: for repository and OCI references.
        values_files: extra values files merged under the adapter's values (platform defaults); their
            `roles.<name>` entries apply when the scheduler creates that role.
        image: default worker image ("repo:tag") for specs that do not name a Kubernetes image.
        image_pull_policy: the workers' imagePullPolicy, Always, IfNotPresent or Never (None: the chart's).
        image_pull_secrets: names of image pull Secrets in the namespace, for a private registry.
        service_account: the workers' ServiceAccount (None: the chart creates one).
        termination_grace_seconds: workers' terminationGracePeriodSeconds.
        node_selector: nodeSelector applied to every role.
        guard_port: port of each worker's guard (AReaL's rpc_server) inside its pod.
        n_gpus_per_node: reported to AReaL when its experiment config has no cluster.n_gpus_per_node.
        python_executable: replaces a controller-side interpreter path at the start of a worker command, and
            starts forked workers.
        fork_module: what fork_workers runs with `python -m` when no command is given (AReaL's rpc_server).
        helm_executable: the helm binary (helm 3 or 4): a path, or a name looked up on PATH, then beside the
            running Python (a virtualenv's bin).
        helm_timeout: helm's per-operation time-out, also how long a deletion waits for the pods to go (seconds).
        history_max: helm revisions kept per release.
        ready_timeout: default time-out of get_workers (seconds).
        fork_mode: "process" (a child of the target's guard, AReaL semantics) or "pod" (a sibling StatefulSet).
        fork_ready_timeout: how long a forked process gets to answer /health (seconds).
        destroy_timeout: how long the engines of workers about to be deleted get to run destroy() (seconds).
        capacity_check: before a change is written, whether a pod of each new or changed role fits some node
            (allocatable resources, nodeSelector, tolerations): "reject" (default) refuses the change, "warn"
            logs and goes on (clusters that autoscale), "off" skips the check.
        ownership: "managed" (the adapter installs and changes the release) or "external" (someone else does;
            the adapter only discovers and calls workers).
        release_name: the release to use (None: derived from experiment and trial).
        lease_grace_seconds: the trainer renews a Lease for its release while the scheduler lives; once a reaper
            has seen the Lease unchanged for this many seconds on its own clock (the trainer died), `areal-workers
            reap` may uninstall the release. 0: no Lease (the release lives until deleted).
        lease_takeover: take the trial's Lease even from another controller that still renews it (which then stops
            writing and raises on its next call). False: a second live controller of the trial is refused
            (LeaseHeldError); a dead one's Lease is taken over after watching it for two of its renewal intervals.
        owner_pod / owner_pod_uid: the trainer's own pod when it runs in the cluster (set from the downward API by
            `areal-workers submit`): the release's objects get it as ownerReference, so Kubernetes' garbage
            collector deletes the workers when the trainer's pod goes.
        owner_job / owner_job_uid: instead, the trainer's Job (`submit` with restarts: each attempt is a new pod
            that reclaims its predecessor's workers, so they must outlive a pod and go with the Job).
        trainer_job: the name of the trainer's Job (`submit` sets it from the pod's label
            batch.kubernetes.io/job-name): the release's NetworkPolicies then admit that Job's pods, not every
            labelled controller of the namespace, to the workers, and admit the release's workers to them
            (AReaL's callback servers; docs/en/security.md#the-trainers-network).
        kueue_queue: a Kueue LocalQueue of the namespace that admits every role this scheduler creates, each as one
            group (all its workers or none); None: not queued. Changing a queued role's size or pods re-creates its
            StatefulSet (the role is queued and admitted again, with fresh workers).
        kueue_priority_class: the Kueue WorkloadPriorityClass of those roles (admission order, preemption); None:
            the pods' priority.
        trainer_address: the address of this machine that AReaL's controllers advertise to the workers (the
            RolloutController's callback server, its proxy gateway): one the worker pods can reach. None: AReaL's
            own choice (gethostip: the host name's address), right inside a pod, often not outside the cluster.
        metrics_address: host:port on which the scheduler serves its Prometheus metrics (docs/en/observability.md),
            e.g. the pod's IP and a port in a pod, `127.0.0.1:0` for any free port; needs the `metrics` extra
            (prometheus-client). None: no metrics.
        log_format: "text" (default: the scheduler's log lines go to AReaL's logging as they are) or "json" (one JSON
            object per line on stderr, with the release and namespace, for log aggregation).
    """

    namespace: str = "default"
    kubeconfig: str | None = None
    context: str | None = None
    chart: str = str(BUNDLED_CHART)
    chart_version: str | None = None
    chart_repo: str | None = None
    values_files: tuple[str, ...] = ()
    image: str | None = None
    image_pull_policy: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    termination_grace_seconds: int | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    guard_port: int = 8000
    n_gpus_per_node: int = 8
    python_executable: str = "python"
    fork_module: str = "areal.infra.rpc.rpc_server"
    helm_executable: str = "helm"
    helm_timeout: float = 300.0
    history_max: int = 10
    ready_timeout: float = 600.0
    fork_mode: ForkMode = "process"
    fork_ready_timeout: float = 60.0
    destroy_timeout: float = 30.0
    capacity_check: CapacityCheck = "reject"
    ownership: ReleaseOwnership = "managed"
    release_name: str | None = None
    lease_grace_seconds: float = 300.0
    lease_takeover: bool = False
    owner_pod: str | None = None
    owner_pod_uid: str | None = None
    owner_job: str | None = None
    owner_job_uid: str | None = None
    trainer_job: str | None = None
    kueue_queue: str | None = None
    kueue_priority_class: str | None = None
    trainer_address: str | None = None
    metrics_address: str | None = None
    log_format: LogFormat = "text"

    def __post_init__(self) -> None:
        if self.image_pull_policy is not None and self.image_pull_policy not in PULL_POLICIES:
            raise ConfigError(
                f"image_pull_policy must be one of {', '.join(PULL_POLICIES)}, got {self.image_pull_policy!r}"
            )
        if self.fork_mode not in ("process", "pod"):
            raise ConfigError(f"fork_mode must be 'process' or 'pod', got {self.fork_mode!r}")
        if self.ownership not in ("managed", "external"):
            raise ConfigError(f"ownership must be 'managed' or 'external', got {self.ownership!r}")
        if self.release_name is not None and (problem := naming.release_name_problem(self.release_name)):
            raise ConfigError(
                f"release_name (AREAL_K8S_RELEASE_NAME): {problem}; or leave it unset, and the release is named "
                f"after the experiment and trial"
            )
        if self.ownership == "external" and not self.release_name:
            raise ConfigError(
                "ownership='external' needs release_name: the name of the release installed "
                "by someone else (helm list -n NAMESPACE)"
            )
        if not 1 <= self.guard_port <= 65535:
            raise ConfigError(f"guard_port must be within 1..65535, got {self.guard_port}")
        if self.termination_grace_seconds is not None and self.termination_grace_seconds < 0:
            raise ConfigError("termination_grace_seconds must be >= 0")
        if self.capacity_check not in CAPACITY_CHECKS:
            raise ConfigError(
                f"capacity_check must be one of {', '.join(CAPACITY_CHECKS)}, got {self.capacity_check!r}"
            )
        for name in ("helm_timeout", "ready_timeout", "fork_ready_timeout", "destroy_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.lease_grace_seconds < 0:
            raise ConfigError(f"lease_grace_seconds must be >= 0 (0: no lease), got {self.lease_grace_seconds}")
        if bool(self.owner_pod) != bool(self.owner_pod_uid):
            raise ConfigError(
                "owner_pod and owner_pod_uid go together (AREAL_K8S_OWNER_POD and "
                "AREAL_K8S_OWNER_POD_UID, from the downward API's metadata.name and metadata.uid)"
            )
        if bool(self.owner_job) != bool(self.owner_job_uid):
            raise ConfigError(
                "owner_job and owner_job_uid go together (AREAL_K8S_OWNER_JOB and AREAL_K8S_OWNER_JOB_UID, from the "
                "downward API's labels batch.kubernetes.io/job-name and batch.kubernetes.io/controller-uid)"
            )
        if self.owner_pod and self.owner_job:
            raise ConfigError("owner_pod and owner_job exclude each other: the workers go with one owner")
        if self.trainer_job is not None and not naming.DNS1123_LABEL.match(self.trainer_job):
            raise ConfigError(
                f"trainer_job must be the name of the trainer's Job (a DNS label), got {self.trainer_job!r}"
            )
        if self.kueue_priority_class and not self.kueue_queue:
            raise ConfigError(
                "kueue_priority_class needs kueue_queue (AREAL_K8S_KUEUE_QUEUE): the LocalQueue that admits the roles"
            )
        if self.trainer_address is not None:
            try:
                ipaddress.ip_address(self.trainer_address)
            except ValueError:
                raise ConfigError(
                    f"trainer_address must be an IP address the worker pods can reach, got {self.trainer_address!r}"
                ) from None
        if self.metrics_address is not None:
            split_address(self.metrics_address)
            if importlib.util.find_spec("prometheus_client") is None:
                raise ConfigError(
                    "metrics_address needs prometheus-client: pip install 'areal-workers[metrics]', or leave "
                    "AREAL_K8S_METRICS_ADDRESS unset"
                )
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log_format must be one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}")
        if self.history_max < 2:
            raise ConfigError("history_max must be >= 2, or rollback has nothing to roll back to")

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE_FILE,
        **overrides: object,
    ) -> KubernetesSchedulerConfig:
        """Defaults, then the environment, then explicit overrides. The namespace is the first of
        AREAL_K8S_NAMESPACE, KUBERNETES_NAMESPACE and, inside a pod, its service account's namespace."""
        environ = os.environ if environ is None else environ
        _refuse_unknown_variables(environ)
        values: dict[str, object] = {}
        namespace = environ.get(NAMESPACE_FALLBACK_VARIABLE) or _read_namespace(namespace_file)
        if namespace:
            values["namespace"] = namespace
        for variable, name in ENVIRONMENT.items():
            raw = environ.get(variable)
            if raw is None or raw == "":
                continue
            parse = ENVIRONMENT_PARSERS.get(name)
            values[name] = parse(raw, variable) if parse is not None else raw
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(
                f"unknown KubernetesSchedulerConfig field(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return replace(cls(), **{**values, **overrides})  # type: ignore[arg-type]


def _refuse_unknown_variables(environ: Mapping[str, str]) -> None:
    """A misspelt AREAL_K8S_ variable would otherwise leave its setting at the default without a word."""
    unknown = sorted(name for name in environ if name.startswith(VARIABLE_PREFIX) and name not in ENVIRONMENT)
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, ENVIRONMENT, n=1)
        hints.append(f"{name} (did you mean {close[0]}?)" if close else name)
    raise ConfigError(
        f"unknown setting(s) {', '.join(hints)}: the AREAL_K8S_ variables are {', '.join(sorted(ENVIRONMENT))}"
    )


def _read_namespace(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:  # not inside a pod
        return None


def split_address(address: str, source: str = "metrics_address") -> tuple[str, int]:
    """`host:port` (`[v6]:port`; an empty host: loopback), e.g. `10.1.2.3:9090` (a pod's IP), `127.0.0.1:0`."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{source} must be host:port (port 0-65535, 0: any free one), got {address!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_address(raw: str, source: str = "metrics_address") -> str:
    """`host:port`, e.g. `127.0.0.1:9090` (port 0: any free one)."""
    split_address(raw, source)
    return raw.strip()


def parse_node_selector(raw: str, source: str = "node_selector") -> dict[str, str]:
    """`k=v,k2=v2`, or a JSON object such as `{"k": "v"}`."""
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{source} is not valid JSON: {error}") from None
        if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
            raise ConfigError(f"{source} must map label keys to string values")
        return parsed
    selector: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{source}: {item!r} is not key=value (expected e.g. 'pool=gpu,zone=a' or JSON)")
        selector[key.strip()] = value.strip()
    return selector


def parse_seconds(raw: str, source: str = "seconds") -> int:
    """An integer number of seconds, e.g. `120`."""
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{source} must be an integer number of seconds, got {raw!r}") from None


def parse_integer(raw: str, source: str = "integer") -> int:
    """An integer, e.g. `8`."""
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{source} must be an integer, got {raw!r}") from None


DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
DURATION_PART = r"(\d+\.?\d*|\.\d+)(ns|us|µs|ms|s|m|h)"  # longest units first: "ms" is not "m" then "s"
DURATION_FORMS = "a duration such as 90s, 15m, 1h30m or 500ms (units h, m, s, ms, us, ns), or plain seconds such as 600"


def parse_duration(raw: str, source: str = "seconds") -> float:
    """A duration as kubectl and helm take it, e.g. `90s`, `15m` or `1h30m`, or plain seconds, e.g. `600` or `1.5`."""
    text = raw.strip()
    try:
        value = float(text)
    except ValueError:
        if not re.fullmatch(f"(?:{DURATION_PART})+", text):
            raise ConfigError(f"{source}: {raw!r} is not a duration: use {DURATION_FORMS}") from None
        value = sum(float(number) * DURATION_UNITS[unit] for number, unit in re.findall(DURATION_PART, text))
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{source}: {raw!r}: a time-out is finite and not negative; use {DURATION_FORMS}")
    return value


def parse_bool(raw: str, source: str = "boolean") -> bool:
    """`true` or `false` (also `1`/`0`, `yes`/`no`)."""
    word = raw.strip().lower()
    if word in ("true", "1", "yes"):
        return True
    if word in ("false", "0", "no"):
        return False
    raise ConfigError(f"{source} must be true or false, got {raw!r}")


def parse_names(raw: str, source: str = "names") -> tuple[str, ...]:
    """Comma-separated, e.g. `platform.yaml,gpu.yaml`, or a JSON list of strings."""
    raw = raw.strip()
    if raw.startswith("["):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{source} is not a valid JSON list: {error}") from None
        if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
            raise ConfigError(f"{source} must be a JSON list of strings")
        return tuple(parsed)
    return tuple(item.strip() for item in raw.split(",") if item.strip())


# Every field has its variable: AREAL_K8S_ and the field's name in capitals (the names of AReaL PR #1316, e.g.
# AREAL_K8S_NAMESPACE, among them), so a trainer started by a plain `python train.py` (or by
# `python -m areal_workers.launch`) is configured entirely from its environment.
VARIABLE_PREFIX = "AREAL_K8S_"
ENVIRONMENT = {f"{VARIABLE_PREFIX}{spec.name.upper()}": spec.name for spec in fields(KubernetesSchedulerConfig)}

# How from_env turns a variable's text into its field's value (fields not listed take the text as it is). The
# first line of each parser's docstring is the format docs/*/configuration.md shows (tools/docgen/config.py).
ENVIRONMENT_PARSERS = {
    "values_files": parse_names,
    "image_pull_secrets": parse_names,
    "termination_grace_seconds": parse_seconds,
    "node_selector": parse_node_selector,
    "guard_port": parse_integer,
    "n_gpus_per_node": parse_integer,
    "history_max": parse_integer,
    "helm_timeout": parse_duration,
    "ready_timeout": parse_duration,
    "fork_ready_timeout": parse_duration,
    "destroy_timeout": parse_duration,
    "lease_grace_seconds": parse_duration,
    "lease_takeover": parse_bool,
    "metrics_address": parse_address,
}
