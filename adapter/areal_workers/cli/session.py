"""What every command shares: the configuration (AREAL_K8S_* variables under the command line's options), the
cluster clients, the trial a command is about, and the exit codes."""

from __future__ import annotations

import json
import re
from collections.abc import Coroutine
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import yaml
from kubernetes import client, config as kube_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from .. import cluster_access, naming
from ..config import ConfigError, KubernetesSchedulerConfig
from ..orchestration.decision_events import DecisionEvents
from ..orchestration.driver import ReleaseDriver
from ..pods.inspector import ReleaseInspector
from ..pods.watch import PodWatch
from ..release import ownership
from ..release.client import HelmError, HelmNotFoundError, Releases, helm_error_text
from ..release.model import ReleaseModel
from ..runtime import backend
from ..runtime.loop_thread import LoopThread

T = TypeVar("T")

# Exit codes: stable, documented in docs/en/cli.md (generated from EXIT_CODES).
EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CLUSTER = 4
EXIT_TIMEOUT = 5
EXIT_ABORTED = 6
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141  # 128 + SIGPIPE: how a shell sees kubectl or helm end when its reader is gone
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_PROBLEM: "the command worked and found a problem: a worker not ready (status, diagnose; status --watch: in "
    "the last frame when --watch-seconds ran out), a failed doctor check, a trainer pod that cannot be created or "
    "started (submit)",
    EXIT_USAGE: "bad arguments or input files, an ambiguous trial, or no helm to run; nothing was changed",
    EXIT_NOT_FOUND: "no such trial, role, worker or revision",
    EXIT_CLUSTER: "the cluster or helm failed: unreachable, forbidden, helm's own error",
    EXIT_TIMEOUT: "a wait ran out (rollback until the workers are ready)",
    EXIT_ABORTED: "a confirmation was declined (down)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C): how status --watch and logs -f end when stopped by hand",
    EXIT_PIPE: "stdout was closed before the output ended (| head): the rest is dropped quietly, as kubectl and helm "
    "do",
}

TOPOLOGY_SELECTOR = "app.kubernetes.io/part-of=areal,app.kubernetes.io/component=topology"


class CliError(Exception):
    """Ends the command with `message` on stderr and `exit_code`."""

    def __init__(self, message: str, exit_code: int = EXIT_PROBLEM) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Trial:
    release: str
    experiment: str
    trial: str


@dataclass(frozen=True)
class Selection:
    """Which trial the command line names: a release, or an experiment and trial (both None: not named)."""

    release: str | None = None
    experiment: str | None = None
    trial: str | None = None

    def __post_init__(self) -> None:
        """A --release no release of the chart can have is refused before anything is read or written."""
        problem = naming.release_name_problem(self.release) if self.release is not None else None
        if problem is not None:
            raise CliError(f"--release: {problem}", EXIT_USAGE)

    def named(self) -> str | None:
        if self.release:
            return self.release
        if self.experiment and self.trial:
            return naming.release_name(self.experiment, self.trial)
        if self.experiment or self.trial:
            raise CliError("--experiment and --trial go together (or name the release with --release)", EXIT_USAGE)
        return None


def kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    """The namespace of the kubeconfig's (current) context, as kubectl uses it."""
    try:
        contexts, current = kube_config.list_kube_config_contexts(config_file=kubeconfig)
    except (kube_config.ConfigException, OSError):
        return None
    chosen = next((c for c in contexts if c["name"] == context), None) if context else current
    return ((chosen or {}).get("context") or {}).get("namespace")


def make_config(
    namespace: str | None, kubeconfig: str | None, context: str | None, release: str | None = None, **overrides: Any
) -> KubernetesSchedulerConfig:
    """AREAL_K8S_* variables, then the options; the namespace falls back to the kubeconfig context's."""
    explicit = {
        key: value
        for key, value in {"kubeconfig": kubeconfig, "context": context, "release_name": release, **overrides}.items()
        if value is not None
    }
    try:
        settings = KubernetesSchedulerConfig.from_env(**explicit)
        if namespace:
            return KubernetesSchedulerConfig.from_env(**explicit, namespace=namespace)
        if settings.namespace == "default":
            found = kubeconfig_namespace(kubeconfig, context)
            if found:
                return KubernetesSchedulerConfig.from_env(**explicit, namespace=found)
        return settings
    except ConfigError as error:
        raise CliError(str(error), EXIT_USAGE) from None


# How a person running the CLI changes the namespace and the cluster, for cluster_access's messages.
CLI_SETTINGS = cluster_access.Settings(
    namespace="the command's namespace (-n, or AREAL_K8S_NAMESPACE)",
    credentials="the kubeconfig and context the command uses (--kubeconfig, --context; KUBECONFIG, "
    "AREAL_K8S_KUBECONFIG, AREAL_K8S_CONTEXT)",
)


def api_message(error: ApiException) -> str:
    try:
        status = json.loads(error.body or "{}")
    except ValueError:
        return str(error.reason)
    return str((status.get("message") if isinstance(status, dict) else None) or error.reason)


def _namespace_in(error: ApiException) -> str | None:
    """The namespace an apiserver's answer names (a namespace not found, `in the namespace "rl"`)."""
    try:
        status = json.loads(error.body or "{}")
    except ValueError:
        return None
    details = (status.get("details") if isinstance(status, dict) else None) or {}
    if details.get("kind") == "namespaces" and details.get("name"):
        return str(details["name"])
    found = re.search(r'in the namespace "([^"]+)"', api_message(error))
    return found.group(1) if found else None


def cluster_error(
    error: ApiException | HTTPError | OSError, doing: str, namespace: str | None = None, server: str | None = None
) -> CliError:
    """An API or connection failure as the command's error (EXIT_CLUSTER), with the cause the scheduler would name
    (cluster_access: an unreachable API server, rejected credentials, a forbidden request with its user, verb and
    resource, a namespace that does not exist) and its fix; other answers as the apiserver gave them."""
    refused = "do this"
    if isinstance(error, ApiException):
        namespace = namespace or _namespace_in(error)
        if error.status == 403 and namespace is None:  # a cluster-scoped request: no namespace to name
            return CliError(
                f"{doing}: forbidden: {api_message(error)}\n(areal-workers doctor lists every permission missing "
                f"and the rbac/ file that grants it)",
                EXIT_CLUSTER,
            )
        refused = cluster_access.attempted(api_message(error)) or refused
    where = server or "the kubeconfig's address"
    cause = cluster_access.api_failure(error, namespace or "", where, refused, CLI_SETTINGS)
    if cause is None and isinstance(error, ApiException):
        return CliError(f"{doing}: the apiserver answered {error.status} {error.reason}", EXIT_CLUSTER)
    return CliError(f"{doing}: {cause}", EXIT_CLUSTER)


class Session:
    """Clients for one command run; `close()` when done."""

    def __init__(self, config: KubernetesSchedulerConfig, selection: Selection = Selection()) -> None:
        self.config, self.selection = config, selection
        self.namespace = config.namespace
        self._loop: LoopThread | None = None

    @cached_property
    def api(self) -> client.ApiClient:
        try:
            return backend.kube_client(self.config)
        except (kube_config.ConfigException, OSError) as error:
            raise CliError(
                f"no cluster credentials: {error} (pass --kubeconfig, or set KUBECONFIG)", EXIT_CLUSTER
            ) from None

    @cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @cached_property
    def releases(self) -> Releases:
        try:
            return Releases(self.config)
        except HelmNotFoundError as error:
            raise CliError(str(error), EXIT_USAGE) from None
        except (OSError, ValueError, yaml.YAMLError) as error:  # the values files
            raise CliError(f"cannot load the values files: {error}", EXIT_USAGE) from None

    @property
    def loop(self) -> LoopThread:
        if self._loop is None:
            self._loop = LoopThread("areal-workers-cli")
        return self._loop

    def helm(self, coroutine: Coroutine[Any, Any, T], doing: str, exit_code: int = EXIT_CLUSTER) -> T:
        try:
            return self.loop.run(coroutine)
        except HelmError as error:
            raise CliError(f"{doing}: helm failed: {helm_error_text(error)}", exit_code) from None
        except ownership.UntrustedRevisionError as error:  # a revision not the chart's, refused before helm ran
            raise CliError(f"{doing}: {error}", EXIT_USAGE) from None

    def kube(self, call: Any, doing: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except (ApiException, HTTPError, ConnectionError) as error:
            raise self.cluster_error(error, doing) from None

    def cluster_error(self, error: ApiException | HTTPError | OSError, doing: str) -> CliError:
        """cluster_error for this command's namespace and API server."""
        server = self.api.configuration.host if "api" in self.__dict__ else None
        return cluster_error(error, doing, self.namespace, server)

    # --- trials ----------------------------------------------------------------------------------

    def trials(self) -> list[Trial]:
        """Every areal-workers trial in the namespace, found by the chart's topology ConfigMaps."""
        maps = self.kube(
            self.core.list_namespaced_config_map,
            f"listing trials in namespace {self.namespace}",
            self.namespace,
            label_selector=TOPOLOGY_SELECTOR,
        ).items
        trials = []
        for configmap in maps:
            topology = json.loads((configmap.data or {}).get("topology.json", "{}"))
            release = (configmap.metadata.labels or {}).get(naming.LABEL_INSTANCE)
            if release:
                trials.append(Trial(release, str(topology.get("experiment", "")), str(topology.get("trial", ""))))
        return sorted(trials, key=lambda t: t.release)

    def release(self) -> str:
        """The trial the command is about: the named one, else the only one in the namespace."""
        named = self.selection.named()
        if named:
            return named
        found = self.trials()
        if len(found) == 1:
            return found[0].release
        if not found:
            raise CliError(
                f"no areal-workers trial in namespace {self.namespace} (another namespace: -n NAME)", EXIT_NOT_FOUND
            )
        listing = "\n".join(f"  {t.release}  (experiment {t.experiment}, trial {t.trial})" for t in found)
        raise CliError(
            f"{len(found)} trials in namespace {self.namespace}; name one with --release or "
            f"--experiment/--trial:\n{listing}",
            EXIT_USAGE,
        )

    def inspector(self, release: str) -> ReleaseInspector:
        return ReleaseInspector(self.core, self.namespace, release)

    def model(self, release: str) -> ReleaseModel:
        """The release's current revision as the scheduler reads it (values and rendered topology); for a group
        applied without helm (Argo CD syncing the chart), its rendered topology alone, with no revision."""
        snapshot = self.helm(self.releases.snapshot(release), f"reading release {release}")
        topology = self.kube(self.inspector(release).topology, f"reading the topology of {release}")
        if snapshot is None:
            return self.external_model(release, topology)
        revision, values = snapshot
        return ReleaseModel(values=values, topology=topology, revision=revision)

    def external_model(self, release: str, topology: dict[str, Any]) -> ReleaseModel:
        """The model of a release helm has no record of: its rendered topology, when the chart's objects are there."""
        if not topology:
            raise CliError(
                f"release {release} not found in namespace {self.namespace} "
                f"(areal-workers status -n {self.namespace} lists the trials)",
                EXIT_NOT_FOUND,
            )
        return ReleaseModel(topology=topology)

    def refuse_external(self, release: str, model: ReleaseModel, doing: str) -> None:
        """Changes to a group applied without helm belong to its owner (Git, through Argo CD: docs/en/gitops.md)."""
        if model.revision is None:
            raise CliError(
                f"cannot {doing} {release}: it was applied without helm (no helm release, only the chart's objects, "
                f"e.g. synced by Argo CD), so its revisions live in Git: change the values there "
                f"(`argocd app history` / `argocd app rollback` for the Application), or delete the Application",
                EXIT_USAGE,
            )

    def foreign_chart(self, release: str, revision: int | None = None) -> str | None:
        """Why `release` (or its `revision`) is not this command's to change (another chart's), or None."""
        chart = self.helm(self.releases.chart_name(release, revision), f"reading the chart of release {release}")
        return ownership.foreign_chart_problem(release, self.namespace, chart, revision)

    def untrusted(self, release: str, revision: int | None = None) -> str | None:
        """What the release's current revision (or `revision`) holds that the chart never renders, or None."""
        which = "the current revision" if revision is None else f"revision {revision}"
        return self.helm(self.releases.untrusted(release, revision), f"reading {which} of release {release}")

    def refuse_foreign(self, release: str, doing: str, revision: int | None = None) -> None:
        """Releases of another chart are not this command's to change, whatever their objects' labels say; nor is
        a revision of another chart that a reused name keeps in its history (`revision`: the one to return to); nor
        a revision whose manifest or hooks hold what the chart never renders (helm's records are Secrets the
        controller identity may write: this command acts with the rights of whoever runs it)."""
        problem = self.foreign_chart(release, revision)
        if problem is not None:
            raise CliError(
                f"cannot {doing} {release}: {problem}; nothing was changed. Name this trial's own release "
                f"(areal-workers status -n {self.namespace} lists them); a release of another chart is removed "
                f"with helm itself (helm uninstall {release} -n {self.namespace})",
                EXIT_USAGE,
            )
        problem = self.untrusted(release, revision)
        if problem is not None:
            raise CliError(f"cannot {doing} {release}: {problem}", EXIT_USAGE)

    def driver(self, release: str) -> ReleaseDriver:
        """The scheduler's own release driver, adopted (for changes: rollback)."""
        parts = backend.connect(self.config, release, lambda worker: None)
        driver = ReleaseDriver(
            release, self.config, parts.releases, parts.inspector, parts.pods, parts.statefulsets, self.loop
        )
        driver.events = DecisionEvents(parts.events, release)  # a person's rollback or down, as the trainer's
        driver.adopt()
        return driver

    def leases(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    def pods(self) -> PodWatch:
        return PodWatch(self.core, self.namespace)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
        if "api" in self.__dict__:
            self.api.close()
