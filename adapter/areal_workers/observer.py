"""What a scheduler reports as it works: its waits, rollbacks, worker failures and guard requests, as calls on one
`Observer`. This one does nothing; runtime/metrics.py's PrometheusObserver counts them for Prometheus when the
scheduler is asked to serve metrics (metrics_address)."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import WorkerFailedError, WorkerTimeoutError


class Observer:
    """The scheduler's hooks; every method returns at once and never raises."""

    def waited(self, operation: str, role: str, outcome: str, seconds: float) -> None:
        """A create_workers / scale_workers / update_workers / get_workers call of `role` took `seconds`;
        `outcome`: ok, failed (a worker failed), timeout or error."""

    def rolled_back(self, action: str, error: BaseException) -> None:
        """After `error` (a failed change), the release was `action`: rolled_back, uninstalled (no revision ever
        had all workers ready) or left (another controller wrote since)."""

    def worker_failed(self, role: str, error: BaseException) -> None:
        """A wait or a liveness check found a worker of `role` with a fatal problem (`error`, its diagnosis)."""

    def guard_request(self, endpoint: str, seconds: float, error: str | None) -> None:
        """One attempt of a request to a worker's guard (`endpoint`: its path); `error`: connection, timeout,
        other (no reply), http_4xx or http_5xx; None when it answered below 400."""

    def close(self) -> None:
        """Stops whatever the observer serves."""


NO_OBSERVER = Observer()

Method = TypeVar("Method", bound=Callable[..., Any])


def role_of(request: Any) -> str:
    """The role a scheduler call is about: its first argument, a role name or a Job."""
    return request if isinstance(request, str) else str(getattr(request, "role", ""))


def timed(operation: str) -> Callable[[Method], Method]:
    """Reports each call of a scheduler method to its `observer` (`waited`), with its first argument's role."""

    def decorate(method: Method) -> Method:
        # AReaL's controllers pass it by keyword (`create_workers(job=job)`): found by name as well as by position.
        first = list(inspect.signature(method).parameters)[1]

        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            observer: Observer = getattr(self, "observer", NO_OBSERVER)
            request = args[0] if args else kwargs.get(first)
            start, outcome = time.monotonic(), "error"
            try:
                result = method(self, *args, **kwargs)
                outcome = "ok"
                return result
            except WorkerTimeoutError:
                outcome = "timeout"
                raise
            except WorkerFailedError:
                outcome = "failed"
                raise
            finally:
                observer.waited(operation, role_of(request), outcome, time.monotonic() - start)

        return wrapper  # type: ignore[return-value]

    return decorate
