"""The guard's identity and state, and one handler per route, with AReaL's answers."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from .engine_host import DuplicateEngineError, EngineCodeError, EngineHost, NoSuchMethodError, import_engine_class
from .forks import ForkedChildren, fork_log_dir
from .ports import PortAllocator
from .protocol import (
    BodyRule,
    HttpError,
    JsonObject,
    bad_request,
    internal_error,
    optional_dict,
    optional_list,
    require_present,
    require_scalar,
    require_str,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuardIdentity:
    experiment_name: str
    trial_name: str
    role: str
    worker_index: int
    name_resolve_type: str
    nfs_record_root: str
    etcd3_addr: str
    fileroot: str | None


@dataclass
class GuardState:
    identity: GuardIdentity
    host: str  # advertised to peers; differs from the bind address only for wildcard binds
    port: int
    ports: PortAllocator
    children: ForkedChildren = field(default_factory=ForkedChildren)
    engines: EngineHost = field(default_factory=EngineHost)
    configuration: JsonObject | None = None


def handle_health(state: GuardState, _body: JsonObject) -> JsonObject:
    identity = state.identity
    engine_names = state.engines.names()
    configuration = state.configuration
    return {
        "status": "healthy",
        "forked_children": state.children.count(),
        "engine_count": len(engine_names),
        "engines": engine_names,
        "role": identity.role,
        "worker_index": identity.worker_index,
        "pid": os.getpid(),
        "host": state.host,
        "port": state.port,
        "experiment_name": identity.experiment_name,
        "trial_name": identity.trial_name,
        "forked": state.children.describe(),
        "configured": None if configuration is None else {"role": configuration["role"], "rank": configuration["rank"]},
        "name_resolve": {
            "type": identity.name_resolve_type,
            "nfs_record_root": identity.nfs_record_root,
            "etcd3_addr": identity.etcd3_addr,
            "registered": False,
        },
        "fileroot": identity.fileroot,
    }


def handle_alloc_ports(state: GuardState, body: JsonObject) -> JsonObject:
    count = require_present(body, "count")
    if not isinstance(count, int) or count <= 0:  # bool is an int here, as in AReaL
        raise bad_request("'count' must be a positive integer")
    return {"status": "success", "ports": state.ports.allocate(int(count)), "host": state.host}


def handle_fork(state: GuardState, body: JsonObject) -> JsonObject:
    role = require_scalar(body, "role")
    worker_index = require_scalar(body, "worker_index")
    raw_cmd = require_present(body, "raw_cmd")
    if not isinstance(raw_cmd, list):
        raise bad_request("'raw_cmd' must be a list")
    command = [str(arg) for arg in raw_cmd]  # AReaL quotes str(arg) of each element
    env_overrides = body.get("env", {})
    if not isinstance(env_overrides, dict):
        raise internal_error(f"'env' must be a dictionary, got {type(env_overrides).__name__}")
    child_env = {**os.environ, **env_overrides}
    identity = state.identity
    log_dir = fork_log_dir(identity.fileroot, identity.experiment_name, identity.trial_name)
    child = state.children.start(role, worker_index, command, child_env, log_dir)
    logger.info("forked %s/%s as pid %d: %s", role, worker_index, child.process.pid, " ".join(command))
    return {"status": "success", "host": state.host, "pid": child.process.pid}


def handle_kill_forked_worker(state: GuardState, body: JsonObject) -> JsonObject:
    role = require_scalar(body, "role")
    worker_index = require_scalar(body, "worker_index")
    pid = state.children.kill(role, worker_index)
    message = f"Killed forked worker {role}/{worker_index} (pid={pid})"
    logger.info(message)
    return {"status": "success", "message": message}


def handle_set_env(_state: GuardState, body: JsonObject) -> JsonObject:
    env_updates = require_present(body, "env")
    if not isinstance(env_updates, dict):
        raise bad_request("'env' must be a dictionary")
    for name, value in env_updates.items():
        try:
            os.environ[name] = str(value)  # AReaL stringifies values the same way
        except (ValueError, OSError) as error:  # "=" or NUL in the name, or an empty name
            raise internal_error(str(error)) from error
    return {"status": "success"}


def config_seed(config: Any) -> Any:
    """``config.seed`` of the config AReaL's deserialize_value would rebuild: a serialized dataclass."""
    if isinstance(config, dict) and config.get("type") == "dataclass":
        data = config.get("data")
        if isinstance(data, dict) and "seed" in data:
            return data["seed"]
    raise internal_error(f"'{type(config).__name__}' object has no attribute 'seed'")


def handle_configure(state: GuardState, body: JsonObject) -> JsonObject:
    config = require_present(body, "config")
    rank = require_present(body, "rank")

    def store() -> None:
        config_seed(config)
        # AReaL seeds with its own --role; the "role" the controller sends is not used.
        state.configuration = {"config": config, "role": state.identity.role, "rank": rank}

    state.engines.run_serially(store)
    return {"status": "success", "message": "Worker configured successful.", "result": None}


def handle_create_engine(state: GuardState, body: JsonObject) -> JsonObject:
    import_path = require_str(body, "engine")
    engine_name = require_str(body, "engine_name")
    init_args = optional_list(body, "init_args")
    init_kwargs = optional_dict(body, "init_kwargs")
    if state.engines.exists(engine_name):
        raise duplicate_engine(engine_name)
    engine_class = import_engine_class(import_path)
    try:
        state.engines.create(engine_name, engine_class, init_args, init_kwargs)
    except DuplicateEngineError as error:
        raise duplicate_engine(engine_name) from error
    except EngineCodeError as error:
        logger.error("engine '%s' failed to instantiate:\n%s", engine_name, error.traceback_text)
        raise HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, f"Failed to instantiate engine: {error}") from error
    logger.info("engine '%s' created from %s", engine_name, import_path)
    return {
        "status": "success",
        "message": f"Engine '{engine_name}' created and initialized",
        "engine_name": engine_name,
        "result": None,
    }


def duplicate_engine(engine_name: str) -> HttpError:
    return bad_request(
        f"Engine '{engine_name}' already exists. Use a different name or delete the existing engine first."
    )


def handle_call(state: GuardState, body: JsonObject) -> JsonObject:
    method_name = require_str(body, "method")
    engine_name = require_str(body, "engine_name")
    args = optional_list(body, "args")
    kwargs = optional_dict(body, "kwargs")
    rpc_meta = body.get("rpc_meta")
    if rpc_meta is not None and not isinstance(rpc_meta, dict):
        raise bad_request("'rpc_meta' must be a dictionary or null")
    engine = state.engines.get(engine_name)
    try:
        result = state.engines.call(engine, method_name, args, kwargs, rpc_meta)
    except NoSuchMethodError as error:
        raise bad_request(str(error)) from error
    except EngineCodeError as error:
        logger.error("engine method '%s' failed:\n%s", method_name, error.traceback_text)
        raise HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, f"Engine method '{method_name}' failed: {error}") from error
    try:
        json.dumps(result)
    except (TypeError, ValueError) as error:
        raise internal_error(
            f"result of '{method_name}' is not JSON-serializable ({error}); "
            "typed tensor payloads are not supported by the reference guard"
        ) from error
    return {"status": "success", "result": result}


Handler = Callable[[GuardState, JsonObject], JsonObject]


@dataclass(frozen=True)
class Route:
    handler: Handler
    body: BodyRule


ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/health"): Route(handle_health, BodyRule.NONE),
    ("POST", "/alloc_ports"): Route(handle_alloc_ports, BodyRule.GUARD),
    ("POST", "/fork"): Route(handle_fork, BodyRule.GUARD),
    ("POST", "/kill_forked_worker"): Route(handle_kill_forked_worker, BodyRule.GUARD),
    ("POST", "/set_env"): Route(handle_set_env, BodyRule.GUARD),
    ("POST", "/configure"): Route(handle_configure, BodyRule.GUARD),
    ("POST", "/create_engine"): Route(handle_create_engine, BodyRule.ENGINE),
    ("POST", "/call"): Route(handle_call, BodyRule.ENGINE),
}
