"""Engines: importing their classes, the named instances of a guard and the one thread that runs their code."""

from __future__ import annotations

import importlib
import logging
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from http import HTTPStatus
from queue import SimpleQueue
from typing import Any

from .protocol import HttpError, JsonObject, bad_request, internal_error

logger = logging.getLogger(__name__)

ENGINE_THREAD_JOIN_SECONDS = 5.0


class EngineCodeError(Exception):
    """Engine code (constructor, method) raised; ``str()`` is the original exception's."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.traceback_text = "".join(traceback.format_exception(type(error), error, error.__traceback__))


class NoSuchMethodError(Exception):
    pass


class DuplicateEngineError(Exception):
    pass


class EngineThread:
    """Runs submitted work one item at a time on a single daemon thread, as AReaL's guard does.

    A daemon thread (not a ThreadPoolExecutor, whose workers are joined at interpreter exit) so
    that an engine call that never returns cannot keep the guard alive after SIGTERM.
    """

    def __init__(self) -> None:
        self._work: SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    def run(self, work: Callable[[], Any]) -> Any:
        """Runs ``work`` on the engine thread and returns its result or raises its exception."""
        future: Future[Any] = Future()
        self._work.put((work, future))
        return future.result()

    def stop(self, timeout: float) -> None:
        self._work.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("engine thread still busy after %.1fs; destroying engines anyway", timeout)

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            work, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work())
            except BaseException as error:  # noqa: BLE001 - re-raised in the waiting request thread
                future.set_exception(error)


def import_engine_class(import_path: str) -> type:
    """Imports "package.module.ClassName" with AReaL's outcomes: 400 (with "Failed to import" for
    ImportError, AttributeError and ValueError), 400 for a TypeError, 500 for anything else."""
    try:
        module_name, dot, class_name = import_path.rpartition(".")
        if not dot:
            raise ValueError(
                f"Invalid module path: {import_path!r}. Expected format 'module.path.ObjectName', got 1 part(s)."
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ImportError(f"Failed to import module '{module_name}' from path '{import_path}': {error}") from error
        try:
            engine_class = getattr(module, class_name)
        except AttributeError as error:
            raise AttributeError(f"Module '{module_name}' has no attribute '{class_name}'.") from error
        if not isinstance(engine_class, type):
            raise TypeError("issubclass() arg 1 must be a class")  # what AReaL's subclass check raises
    except (ValueError, ImportError, AttributeError) as error:
        raise bad_request(f"Failed to import engine '{import_path}': {error}") from error
    except TypeError as error:
        raise bad_request(str(error)) from error
    except Exception as error:  # the module's own top-level code raised: engine code, may raise anything
        logger.error("engine module of %s raised while imported:\n%s", import_path, traceback.format_exc())
        raise internal_error(str(error)) from error
    return engine_class


def check_broadcast(rpc_meta: JsonObject | None) -> None:
    """AReaL's _should_broadcast_payload validation; broadcasting itself needs a process group."""
    if rpc_meta is not None and "broadcast" in rpc_meta and not isinstance(rpc_meta["broadcast"], bool):
        raise ValueError(f"Invalid rpc_meta.broadcast: expected bool, got {type(rpc_meta['broadcast'])}")


class EngineHost:
    """The named engine instances of this guard and the thread that runs their code."""

    def __init__(self) -> None:
        self._engines: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._thread = EngineThread()

    def names(self) -> list[str]:
        with self._lock:
            return list(self._engines)

    def exists(self, engine_name: str) -> bool:
        with self._lock:
            return engine_name in self._engines

    def get(self, engine_name: str) -> Any:
        with self._lock:
            engine = self._engines.get(engine_name)
            available = list(self._engines)
        if engine is None:
            raise HttpError(HTTPStatus.NOT_FOUND, f"Engine '{engine_name}' not found. Available engines: {available}")
        return engine

    def run_serially(self, work: Callable[[], Any]) -> Any:
        return self._thread.run(work)

    def create(self, engine_name: str, engine_class: type, args: list[Any], kwargs: JsonObject) -> None:
        """Raises DuplicateEngineError or EngineCodeError."""

        def construct() -> None:
            # Checked again here: the engine thread serializes creations, the earlier check does not.
            if self.exists(engine_name):
                raise DuplicateEngineError(engine_name)
            try:
                engine = engine_class(*args, **kwargs)
            except Exception as error:  # engine constructors may raise anything
                raise EngineCodeError(error) from error
            with self._lock:
                self._engines[engine_name] = engine

        self._thread.run(construct)

    def call(
        self, engine: Any, method_name: str, args: list[Any], kwargs: JsonObject, rpc_meta: JsonObject | None
    ) -> Any:
        """Raises NoSuchMethodError for an AttributeError (AReaL's mapping, also when the method
        itself raised it), EngineCodeError for anything else the method raised."""

        def invoke() -> Any:
            try:
                check_broadcast(rpc_meta)
                result = getattr(engine, method_name)(*args, **kwargs)
                if isinstance(result, Future):  # AReaL waits for engines' future results too
                    result = result.result()
                return result
            except AttributeError as error:
                raise NoSuchMethodError(f"Engine does not have method '{method_name}'") from error
            except Exception as error:  # engine methods may raise anything
                raise EngineCodeError(error) from error

        return self._thread.run(invoke)

    def destroy_all(self) -> None:
        self._thread.stop(ENGINE_THREAD_JOIN_SECONDS)
        with self._lock:
            engines = list(self._engines.items())
            self._engines.clear()
        for engine_name, engine in engines:
            destroy = getattr(engine, "destroy", None)
            if not callable(destroy):
                continue
            try:
                destroy()
                logger.info("engine '%s' destroyed", engine_name)
            except Exception:  # engine code; one failing destroy must not skip the rest
                logger.exception("engine '%s' failed to destroy", engine_name)
