"""Helm releases of charts/areal-workers through pyhelm3: apply values, read them back, roll back, uninstall.

pyhelm3 is asyncio; these coroutines run on the scheduler's helper loop (see runtime/loop_thread.py), never on the
caller's.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml
from pyhelm3 import Client
from pyhelm3.command import Command, SafeLoader as HelmLoader
from pyhelm3.errors import Error as HelmError, ReleaseNotFoundError
from pyhelm3.models import Chart, ChartMetadata, Release, ReleaseRevision, ReleaseRevisionStatus

from ..config import BUNDLED_CHART, KubernetesSchedulerConfig
from ..errors import InvalidSchedulerSetupError
from ..naming import role_problem
from . import ownership
from .render_gate import RenderGate

__all__ = ["HelmError", "HelmNotFoundError", "ReleaseRevision", "Releases", "Snapshot", "find_helm", "merge_values"]

Snapshot = tuple[int, dict[str, Any]]  # a revision's number and its user-supplied values, as helm recorded them
# The rules of the chart's controller and reaper Roles (rbac/ is written from them): the bundled chart's files.
CHART_RULES = BUNDLED_CHART / "files"
RULE_FILES = ("controller-rules.yaml", "reaper-rules.yaml")
_HELM_MAJOR: dict[str, int] = {}  # helm's major version by executable, asked once per process


class _MissingReleaseProbes(logging.Filter):
    """pyhelm3 logs "command failed: <command>" as a warning before it raises. `helm status` failing is how
    `Releases.current` learns that a release does not exist yet, on every first install, so that warning only
    alarms whoever reads the trainer's log; every other failure reaches the caller as an error with helm's stderr."""

    def filter(self, record: logging.LogRecord) -> bool:
        command = str(record.args[0]) if isinstance(record.args, tuple) and record.args else ""
        return not (record.msg == "command failed: %s" and " status " in f" {command} ")


logging.getLogger("pyhelm3.command").addFilter(_MissingReleaseProbes())

# pyhelm3's loader of helm's YAML (a plain `=` is a string), on libyaml's parser where PyYAML has it: a render of a
# few roles parses in a seventh of the time of the pure-Python parser's, the same documents.
MANIFEST_LOADER: Any = HelmLoader
if yaml.__with_libyaml__:

    class _LibyamlHelmLoader(yaml.CSafeLoader):
        pass

    _LibyamlHelmLoader.add_constructor("tag:yaml.org,2002:value", HelmLoader.construct_value)
    MANIFEST_LOADER = _LibyamlHelmLoader

PENDING = {
    ReleaseRevisionStatus.PENDING_INSTALL,
    ReleaseRevisionStatus.PENDING_UPGRADE,
    ReleaseRevisionStatus.PENDING_ROLLBACK,
    ReleaseRevisionStatus.UNINSTALLING,
}


def merge_values(*layers: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of values files: later layers win; maps merge key by key; lists and scalars replace."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = _merge(merged, layer)
    return merged


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


class HelmNotFoundError(InvalidSchedulerSetupError):
    """The configured helm executable is not there: `where` it was looked for, and the `fix`."""

    def __init__(self, where: str, fix: str) -> None:
        super().__init__(f"helm not found: {where}; {fix}")
        self.where, self.fix = where, fix


def find_helm(executable: str) -> str:
    """The helm binary to run: `executable` as a path, or a name on PATH, else beside the running interpreter (a
    virtualenv's bin, where pip puts console scripts such as areal-workers: a helm there is found without
    activating the virtualenv)."""
    found = shutil.which(executable)
    beside = Path(sys.executable).parent
    if found is None and not os.path.dirname(executable):
        found = shutil.which(executable, path=str(beside))
    if found is None:
        where = (
            f"{executable} is not an executable file"
            if os.path.dirname(executable)
            else f"no executable {executable!r} on PATH or in {beside}"
        )
        raise HelmNotFoundError(
            where,
            "install helm 3.x or 4.x (https://helm.sh/docs/intro/install/), or name it "
            "with AREAL_K8S_HELM_EXECUTABLE (KubernetesSchedulerConfig.helm_executable)",
        )
    return found


@functools.cache
def chart_grants() -> set[ownership.Grant]:
    """What the chart's Roles grant: the rules its controllerRbac and reaper Roles render (rbac/ holds the same)."""
    rules = [rule for name in RULE_FILES for rule in yaml.safe_load((CHART_RULES / name).read_text())]
    return ownership.grants(rules)


def helm_error_text(error: HelmError) -> str:
    """The useful part of a failed helm command: its stderr, without the usage noise."""
    stderr = getattr(error, "stderr", b"") or b""
    text = (stderr.decode(errors="replace") if isinstance(stderr, bytes) else str(stderr)) or str(error)
    return text.strip().removeprefix("Error: ")


class Releases:
    """One namespace's releases of the configured chart."""

    def __init__(self, config: KubernetesSchedulerConfig) -> None:
        self.config = config
        self.namespace = config.namespace
        self.file_values = merge_values(*(self._load(path) for path in config.values_files))  # before helm is looked up
        self.executable = executable = find_helm(config.helm_executable)
        # The command layer is used directly for upgrades: its JSON output is the release record helm wrote,
        # values included, which pyhelm3's Client drops (so reading them back would cost a `helm get values`).
        self.command = Command(
            executable=executable,
            kubeconfig=Path(config.kubeconfig) if config.kubeconfig else None,
            kubecontext=config.context,
            history_max_revisions=config.history_max,
            default_timeout=f"{int(config.helm_timeout)}s",
        )
        self.client = Client(self.command, executable=executable)
        self._chart: Chart | None = None

    @staticmethod
    def _load(path: str) -> dict[str, Any]:
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except yaml.YAMLError as error:
            raise ValueError(f"values file {path} is not valid YAML: {error}") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"values file {path} must hold a mapping at the top level")
        # The role keys checked here, by name and rule: helm's schema says only "at '': invalid propertyName".
        for section in ("roles", "colocations", "forks"):
            entries = loaded.get(section)
            for role in entries if isinstance(entries, dict) else ():
                problem = role_problem(role)
                if problem:
                    raise ValueError(f"values file {path}: {section}.{role}: {problem}")
        return loaded

    async def chart(self) -> Chart:
        """The configured chart and its metadata: a chart directory's Chart.yaml read here (what `helm show chart`
        prints for one, without a helm process), any other reference through `helm show chart`."""
        if self._chart is None:
            directory = Path(self.config.chart)
            if self.config.chart_repo is None and (directory / "Chart.yaml").is_file():
                metadata = yaml.safe_load((directory / "Chart.yaml").read_text())
                self._chart = Chart(self.command, ref=directory.resolve(), metadata=metadata)
            else:
                self._chart = await self.client.get_chart(
                    self.config.chart, repo=self.config.chart_repo, version=self.config.chart_version
                )
        return self._chart

    async def post_renders(self) -> bool:
        """Whether `helm upgrade` takes RenderGate's post-renderer: helm 3 does; helm 4 takes plugins only."""
        if self.executable not in _HELM_MAJOR:
            version = (await self.command.version()).strip().lstrip("v")
            _HELM_MAJOR[self.executable] = int(version.split(".")[0]) if version[:1].isdigit() else 0
        return _HELM_MAJOR[self.executable] == 3

    async def current(self, name: str) -> ReleaseRevision | None:
        """The release's current revision, as `helm status` records it (None: no release). Not pyhelm3's
        Client.get_current_revision, which parses the revision's whole manifest and hooks with PyYAML's pure-Python
        parser for fields none of this package reads: about 50 ms of CPU for a release of four roles, on every read
        of a release (each adoption, wait, status, uninstall)."""
        record = await self._status(name)
        return None if record is None else self._revision(record)

    async def _status(self, name: str, revision: int | None = None) -> dict[str, Any] | None:
        """`helm status` of the release's current revision (or `revision`): None when helm has no such one."""
        try:
            return await self.command.status(name, namespace=self.namespace, revision=revision)
        except ReleaseNotFoundError:
            return None

    def _revision(self, record: dict[str, Any]) -> ReleaseRevision:
        info = record["info"]
        chart = record.get("chart") or {}
        return ReleaseRevision(
            self.command,
            release=Release(self.command, name=record["name"], namespace=record["namespace"]),
            revision=record["version"],
            status=info["status"],
            updated=info["last_deployed"],
            description=info.get("description"),
            notes=info.get("notes"),
            chart_metadata=ChartMetadata(**chart["metadata"]) if chart.get("metadata") else None,
        )

    async def chart_name(self, name: str, revision: int | None = None) -> str | None:
        """The name of the chart of the release's current revision (or of `revision`), as helm recorded it (None:
        no release, or no such revision in its history)."""
        if revision is None:
            entry = await self.current(name)
        else:
            entry = next((e for e in await self.history(name) if e.revision == revision), None)
        return None if entry is None else (await entry.chart_metadata()).name

    async def snapshot(self, name: str, current: ReleaseRevision | None = None) -> Snapshot | None:
        """The number and user-supplied values of the current revision (None: no release); `current`: that revision,
        when the caller just read it."""
        revision = current or await self.current(name)
        return None if revision is None else (revision.revision, await revision.values())

    async def values(self, name: str, revision: int) -> dict[str, Any] | None:
        """The user-supplied values of one revision (None when the history no longer holds it)."""
        for entry in await self.history(name):
            if entry.revision == revision:
                return await entry.values()
        return None

    def layered(self, values: dict[str, Any]) -> dict[str, Any]:
        """The values files under `values`. A file's `roles.<name>` (per-role placement, volumes, ...) applies
        once the scheduler creates that role, and never creates one by itself."""
        files = copy.deepcopy(self.file_values)
        files["roles"] = {
            role: settings
            for role, settings in (files.get("roles") or {}).items()
            if role in (values.get("roles") or {})
        }
        return merge_values(files, values)

    async def apply(
        self, name: str, values: dict[str, Any], description: str, gate: RenderGate | None = None
    ) -> Snapshot:
        """One `helm upgrade --install` with exactly these values (over the configured values files); returns the
        revision helm wrote, read from its own record of it. With `gate`, helm applies its render only once the
        gate's verdict lets it (RenderGate). Without helm's client-side OpenAPI validation: it
        refused nothing the API server lets through and was 40% of the upgrade's time (docs/en/decisions.md,
        "One helm upgrade without client-side OpenAPI validation")."""
        command = [
            "upgrade",
            name,
            *await self._chart_arguments(),
            "--install",
            "--history-max",
            str(self.config.history_max),
            "--timeout",
            f"{int(self.config.helm_timeout)}s",
            "--namespace",
            self.namespace,
            "--description",
            description[:200],
            "--reset-values",
            "--disable-openapi-validation",
            "--output",
            "json",
            "--values",
            "-",
            *(gate.helm_flags() if gate is not None else []),
        ]
        output = await self.command.run(command, json.dumps(self.layered(values)).encode())
        record = json.loads(output[output.index(b"{") :])  # helm 4 may print OCI pull lines before the JSON
        return int(record["version"]), record.get("config") or {}

    async def render(self, name: str, values: dict[str, Any]) -> list[dict[str, Any]]:
        """The manifests an apply would send (helm template: no cluster access)."""
        command = ["template", name, *await self._chart_arguments(), "--skip-crds", "--namespace", self.namespace]
        output = await self.command.run([*command, "--values", "-"], json.dumps(self.layered(values)).encode())
        return list(yaml.load_all(output, Loader=MANIFEST_LOADER))

    async def _chart_arguments(self) -> list[str]:
        """The chart as helm's upgrade and template take it: its reference, and its repository and version."""
        chart = await self.chart()
        arguments = [str(chart.ref)]
        if chart.repo:
            arguments.extend(["--repo", chart.repo])
        if chart.metadata.version:
            arguments.extend(["--version", chart.metadata.version])
        return arguments

    async def history(self, name: str) -> list[ReleaseRevision]:
        revision = await self.current(name)
        if revision is None:
            return []
        return sorted(await revision.release.history(), key=lambda r: r.revision)

    async def untrusted(self, name: str, revision: int | None = None) -> str | None:
        """What in the release's current revision (or `revision`), manifest and hooks, the chart never renders
        (ownership.foreign_object_problem); None when nothing, or when helm has no such release or revision."""
        record = await self._status(name, revision)
        return None if record is None else self._foreign(name, record, revision)

    def _foreign(self, name: str, record: dict[str, Any], revision: int | None = None) -> str | None:
        """untrusted's answer for the `helm status` record of one revision."""
        number = int(record.get("version") or revision or 0)
        recorded = record.get("namespace")
        if recorded not in (None, "", self.namespace):
            return (
                f"revision {number} of release {name} in namespace {self.namespace} is recorded for namespace "
                f"{recorded}: helm did not write it there. Nothing was changed; inspect it with `helm get all {name} "
                f"--revision {number} -n {self.namespace}`"
            )
        hooks = [(str(hook.get("name")), str(hook.get("manifest") or "")) for hook in record.get("hooks") or []]
        manifest = str(record.get("manifest") or "")
        return ownership.foreign_object_problem(name, self.namespace, number, manifest, hooks, chart_grants())

    def _trusted(self, name: str, record: dict[str, Any], revision: int | None = None) -> ReleaseRevision:
        """The revision of this `helm status` record, once it holds only what the chart renders;
        UntrustedRevisionError otherwise (helm would act on objects the chart never renders)."""
        problem = self._foreign(name, record, revision)
        if problem is not None:
            raise ownership.UntrustedRevisionError(problem)
        return self._revision(record)

    async def _require_trusted(self, name: str, revision: int) -> None:
        problem = await self.untrusted(name, revision)
        if problem is not None:
            raise ownership.UntrustedRevisionError(problem)

    async def rollback(self, name: str, revision: int) -> ReleaseRevision:
        """`helm rollback` to `revision`, once both it (applied, its hooks run) and the current revision (what it
        lists and the target does not is deleted) hold only what the chart renders."""
        record = await self._status(name)
        if record is None:
            raise ReleaseNotFoundError(1, "", f"release {name} not found")
        current = self._trusted(name, record)
        await self._require_trusted(name, revision)
        return await current.release.rollback(revision, cleanup_on_fail=True)

    async def uninstall(self, name: str) -> bool:
        """Removes the release and everything it made; False when there was none. Its current revision (what
        helm deletes, and whose hooks it runs) must hold only what the chart renders."""
        record = await self._status(name)
        if record is None:
            return False
        self._trusted(name, record)
        await self.client.uninstall_release(name, namespace=self.namespace, wait=True)
        return True

    async def recover(self, name: str) -> ReleaseRevision | None:
        """A release left pending by a crashed operation becomes usable again (rolled back or uninstalled), once
        the revisions that changes (the pending one, and the one before it a rollback returns to) are the chart's."""
        record = await self._status(name)
        if record is None:
            return None
        current = self._revision(record)
        if current.status not in PENDING:
            return current
        self._trusted(name, record)
        rolled_back = {ReleaseRevisionStatus.PENDING_UPGRADE, ReleaseRevisionStatus.PENDING_ROLLBACK}
        if current.status in rolled_back and current.revision > 1:
            await self._require_trusted(name, current.revision - 1)
        return await self.client.get_proceedable_revision(name, namespace=self.namespace)
