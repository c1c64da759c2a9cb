"""areal-workers: AReaL's scheduler contract on Kubernetes, over Helm releases of charts/areal-workers."""

from ._version import __version__
from .areal_types import Job, SchedulingSpec, SchedulingStrategy, Worker
from .config import ConfigError, KubernetesSchedulerConfig
from .errors import (
    ClusterAccessError,
    EngineCallError,
    EngineCreationError,
    EngineImportError,
    GPUAllocationError,
    InvalidRequestError,
    InvalidSchedulerSetupError,
    PortAllocationError,
    RPCConnectionError,
    SchedulerError,
    WorkerConfigurationError,
    WorkerCreationError,
    WorkerFailedError,
    WorkerNotFoundError,
    WorkerTimeoutError,
)
from .scheduler import KubernetesScheduler
from .trainer_hook import register_with_areal

__all__ = [
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
