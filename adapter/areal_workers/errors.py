"""AReaL's scheduler exceptions: AReaL's own classes when `areal` is importable, otherwise classes with the same
names, constructors and attributes, so code written against AReaL catches what we raise either way.

A diagnosis (pod, container, reason, events, log lines) is attached with `attach_diagnosis`, which keeps AReaL's
constructor signatures intact: the text goes into the exception's notes (shown in tracebacks) and its
`diagnosis` attribute.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = [
    "EngineCallError",
    "EngineCreationError",
    "EngineImportError",
    "GPUAllocationError",
    "PortAllocationError",
    "RPCConnectionError",
    "SchedulerError",
    "WorkerConfigurationError",
    "WorkerCreationError",
    "WorkerFailedError",
    "WorkerNotFoundError",
    "WorkerTimeoutError",
    "InvalidRequestError",
    "InvalidSchedulerSetupError",
    "ClusterAccessError",
    "InputError",
    "LeaseHeldError",
    "LeaseLostError",
    "add_note",
    "attach_diagnosis",
    "refuse_unknown_fields",
    "USING_AREAL_EXCEPTIONS",
]


def _areal_exceptions() -> Any | None:
    if importlib.util.find_spec("areal") is None:
        return None
    for module in ("areal.infra.scheduler.exceptions", "areal.scheduler.exceptions"):
        try:
            if importlib.util.find_spec(module) is not None:
                return importlib.import_module(module)
        except ModuleNotFoundError:
            continue
    return None


_areal = _areal_exceptions()
USING_AREAL_EXCEPTIONS = _areal is not None

# mypy checks against the classes below, which have AReaL's names, constructors and attributes.
if not TYPE_CHECKING and _areal is not None:
    SchedulerError = _areal.SchedulerError
    WorkerCreationError = _areal.WorkerCreationError
    WorkerConfigurationError = _areal.WorkerConfigurationError
    WorkerFailedError = _areal.WorkerFailedError
    WorkerNotFoundError = _areal.WorkerNotFoundError
    EngineCreationError = _areal.EngineCreationError
    EngineCallError = _areal.EngineCallError
    WorkerTimeoutError = _areal.WorkerTimeoutError
    PortAllocationError = _areal.PortAllocationError
    GPUAllocationError = _areal.GPUAllocationError
    RPCConnectionError = _areal.RPCConnectionError
    EngineImportError = _areal.EngineImportError
else:

    class SchedulerError(Exception):
        """Base class of every scheduler error."""

    class WorkerCreationError(SchedulerError):
        def __init__(self, worker_key: str, reason: str, details: str = "") -> None:
            self.worker_key, self.reason, self.details = worker_key, reason, details
            message = f"Failed to create worker '{worker_key}': {reason}"
            super().__init__(f"{message}\nDetails: {details}" if details else message)

    class WorkerConfigurationError(SchedulerError):
        def __init__(self, worker_key: str, reason: str, details: str = "") -> None:
            self.worker_key, self.reason, self.details = worker_key, reason, details
            message = f"Failed to configure worker '{worker_key}': {reason}"
            super().__init__(f"{message}\nDetails: {details}" if details else message)

    class WorkerFailedError(SchedulerError):
        def __init__(self, worker_id: str, exit_code: int, stderr: str = "") -> None:
            self.worker_id, self.exit_code, self.stderr = worker_id, exit_code, stderr
            message = f"Worker '{worker_id}' failed with exit code {exit_code}"
            super().__init__(f"{message}\nStderr output:\n{stderr}" if stderr else message)

    class WorkerNotFoundError(SchedulerError):
        def __init__(self, worker_id: str) -> None:
            self.worker_id = worker_id
            super().__init__(f"Worker '{worker_id}' not found")

    class EngineCreationError(SchedulerError):
        def __init__(self, worker_id: str, reason: str, status_code: int | None = None) -> None:
            self.worker_id, self.reason, self.status_code = worker_id, reason, status_code
            message = f"Failed to create engine on worker '{worker_id}': {reason}"
            super().__init__(f"{message} (HTTP {status_code})" if status_code else message)

    class EngineCallError(SchedulerError):
        def __init__(self, worker_id: str, method: str, reason: str, attempt: int = 1) -> None:
            self.worker_id, self.method, self.reason, self.attempt = worker_id, method, reason, attempt
            message = f"Failed to call method '{method}' on worker '{worker_id}': {reason}"
            super().__init__(f"{message} (after {attempt} attempts)" if attempt > 1 else message)

    class WorkerTimeoutError(SchedulerError):
        def __init__(self, worker_key: str, timeout: float) -> None:
            self.worker_key, self.timeout = worker_key, timeout
            super().__init__(f"Timeout waiting for worker '{worker_key}' (waited {timeout}s)")

    class PortAllocationError(SchedulerError):
        def __init__(self, reason: str) -> None:
            self.reason = reason
            super().__init__(f"Failed to allocate ports: {reason}")

    class GPUAllocationError(SchedulerError):
        def __init__(self, reason: str) -> None:
            self.reason = reason
            super().__init__(f"Failed to allocate GPU resources: {reason}")

    class RPCConnectionError(SchedulerError):
        def __init__(self, worker_id: str, host: str, port: int, reason: str) -> None:
            self.worker_id, self.host, self.port, self.reason = worker_id, host, port, reason
            super().__init__(f"Failed to connect to worker '{worker_id}' at {host}:{port}: {reason}")

    class EngineImportError(SchedulerError):
        def __init__(self, import_path: str, reason: str) -> None:
            self.import_path, self.reason = import_path, reason
            super().__init__(f"Failed to import engine '{import_path}': {reason}")


class InvalidRequestError(WorkerCreationError, ValueError):
    """A request AReaL's schedulers reject with ValueError (e.g. an unknown scheduling strategy type); also a
    WorkerCreationError, so callers written for either AReaL's or this scheduler's errors catch it."""


class InvalidSchedulerSetupError(SchedulerError, ValueError):
    """The scheduler cannot be constructed as asked (e.g. no experiment or trial name): AReaL raises ValueError."""


class InputError(ValueError):
    """A submit file, a job file or a setting in them that is not valid; nothing was done (`areal-workers`: exit 2)."""


def refuse_unknown_fields(
    value: Iterable[str], known: Sequence[str], where: object, owner: str, prefix: str = ""
) -> None:
    """Raises InputError when `value` (a mapping's keys) has fields `known` lacks: `{where}: unknown field(s)
    {prefix}a, {prefix}b; {owner} has {known}`, the unknown ones sorted, `known` in its own order."""
    unknown = sorted(set(value) - set(known))
    if unknown:
        names = ", ".join(prefix + name for name in unknown)
        raise InputError(f"{where}: unknown field(s) {names}; {owner} has {', '.join(known)}")


class ClusterAccessError(SchedulerError):
    """The scheduler cannot work in its namespace: the API server does not answer ("unreachable"), the namespace
    does not exist ("namespace-missing") or is being deleted ("namespace-terminating"), or this identity may not
    act there ("forbidden"). `cause` holds that word; the message says what to change."""

    def __init__(self, cause: str, message: str) -> None:
        self.cause = cause
        super().__init__(message)


class LeaseHeldError(WorkerCreationError):
    """Another live controller holds the trial's Lease (it renewed it while this scheduler watched), or a reaper is
    uninstalling the release: this scheduler writes nothing. AReaL's WorkerCreationError(worker_key, reason,
    details), the release as the key; `details` says what to do (lease_takeover takes the Lease anyway)."""


class LeaseLostError(WorkerCreationError):
    """The trial's Lease, held by this scheduler, was deleted by a reaper (which uninstalls the release), marked for
    reaping or taken over by another controller: this scheduler stopped writing and every later call raises this,
    never re-creating workers behind the reaper's or the other controller's back. AReaL's WorkerCreationError
    signature, the release as the key."""


_Error = TypeVar("_Error", bound=BaseException)


def attach_diagnosis(error: _Error, diagnosis: str, reason: str | None = None) -> _Error:
    """Attaches a human-readable diagnosis without changing AReaL's constructor signatures; `reason`: the
    diagnosis' verdict in one word, as reasons.Reason names it ("OOMKilled"), for the metrics and Events."""
    error.diagnosis = diagnosis  # type: ignore[attr-defined]
    if reason is not None:
        error.diagnosis_reason = reason  # type: ignore[attr-defined]
    add_note(error, diagnosis)
    return error


def diagnosed_reason(error: BaseException) -> str | None:
    """The verdict attach_diagnosis recorded with the error (None: none was)."""
    reason = getattr(error, "diagnosis_reason", None)
    return reason if isinstance(reason, str) else None


def add_note(error: BaseException, note: str) -> None:
    """`error.add_note(note)` where Python has it (>= 3.11, which prints notes with the traceback); 3.10 has none."""
    if sys.version_info >= (3, 11):
        error.add_note(note)
