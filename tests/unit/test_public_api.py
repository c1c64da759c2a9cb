"""What users import from areal-workers stays where it is, whatever moves inside the package: the names of
`areal_workers`, `register_with_areal`, the modules named in the docs (`areal_workers.config`,
`areal_workers.errors`, `python -m areal_workers.launch`), the configuration's fields, the error classes and the
`areal-workers` console script's target."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import tomllib

import pytest

import areal_workers
from repo_paths import REPO

PUBLIC_NAMES = [
    "ClusterAccessError",
    "ConfigError",
    "EngineCallError",
    "EngineCreationError",
    "EngineImportError",
    "GPUAllocationError",
    "InvalidRequestError",
    "InvalidSchedulerSetupError",
    "Job",
    "KubernetesScheduler",
    "KubernetesSchedulerConfig",
    "PortAllocationError",
    "RPCConnectionError",
    "SchedulerError",
    "SchedulingSpec",
    "SchedulingStrategy",
    "Worker",
    "WorkerConfigurationError",
    "WorkerCreationError",
    "WorkerFailedError",
    "WorkerNotFoundError",
    "WorkerTimeoutError",
    "__version__",
    "register_with_areal",
]
ERROR_CLASSES = [
    "ClusterAccessError",
    "EngineCallError",
    "EngineCreationError",
    "EngineImportError",
    "GPUAllocationError",
    "InvalidRequestError",
    "InvalidSchedulerSetupError",
    "PortAllocationError",
    "RPCConnectionError",
    "SchedulerError",
    "WorkerConfigurationError",
    "WorkerCreationError",
    "WorkerFailedError",
    "WorkerNotFoundError",
    "WorkerTimeoutError",
]
CONFIG_FIELDS = [
    "namespace",
    "kubeconfig",
    "context",
    "chart",
    "chart_version",
    "chart_repo",
    "values_files",
    "image",
    "image_pull_policy",
    "image_pull_secrets",
    "service_account",
    "termination_grace_seconds",
    "node_selector",
    "guard_port",
    "n_gpus_per_node",
    "python_executable",
    "fork_module",
    "helm_executable",
    "helm_timeout",
    "history_max",
    "ready_timeout",
    "fork_mode",
    "fork_ready_timeout",
    "destroy_timeout",
    "capacity_check",
    "ownership",
    "release_name",
    "lease_grace_seconds",
    "lease_takeover",
    "owner_pod",
    "owner_pod_uid",
    "owner_job",
    "owner_job_uid",
    "trainer_job",
    "kueue_queue",
    "kueue_priority_class",
    "trainer_address",
    "metrics_address",
    "log_format",
]
# Modules the docs, the examples or the chart tell users to import or run.
PUBLIC_MODULES = [
    "areal_workers.config",
    "areal_workers.errors",
    "areal_workers.launch",
    "areal_workers.naming",
    "areal_workers.scheduler",
    "areal_workers.cli",
    "areal_workers.cli.main",
]
CONSOLE_SCRIPT = ("areal-workers", "areal_workers.cli.main:main")


def test_the_package_exports_the_same_names():
    assert sorted(areal_workers.__all__) == PUBLIC_NAMES


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_every_exported_name_resolves(name):
    assert getattr(areal_workers, name) is not None


def test_register_with_areal_is_callable_from_the_package():
    assert callable(areal_workers.register_with_areal)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_the_public_modules_import(module):
    importlib.import_module(module)


def test_the_launcher_runs_as_a_module():
    launch = importlib.import_module("areal_workers.launch")
    assert callable(launch.main)


def test_the_configuration_keeps_its_fields():
    fields = [field.name for field in dataclasses.fields(areal_workers.KubernetesSchedulerConfig)]
    assert fields == CONFIG_FIELDS
    from areal_workers.config import ConfigError, KubernetesSchedulerConfig

    assert (KubernetesSchedulerConfig, ConfigError) == (
        areal_workers.KubernetesSchedulerConfig,
        areal_workers.ConfigError,
    )


@pytest.mark.parametrize("name", ERROR_CLASSES)
def test_every_error_class_is_in_errors_and_the_package(name):
    errors = importlib.import_module("areal_workers.errors")
    error = getattr(errors, name)
    assert error is getattr(areal_workers, name)
    assert issubclass(error, errors.SchedulerError)


def test_the_console_script_points_at_the_cli_main():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == dict([CONSOLE_SCRIPT])
    module, _, function = CONSOLE_SCRIPT[1].partition(":")
    assert callable(getattr(importlib.import_module(module), function))


def test_the_installed_console_script_is_the_same():
    installed = {
        entry.name: entry.value
        for entry in importlib.metadata.entry_points(group="console_scripts")
        if entry.dist is not None and entry.dist.name == "areal-workers"
    }
    assert installed == dict([CONSOLE_SCRIPT])
