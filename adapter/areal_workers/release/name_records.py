"""Clearing a trial's name_resolve records before its first workers start, as AReaL's schedulers do at start.

Stale records of an earlier run of the same trial would point peers at dead addresses. The flags are the ones the
chart renders for the workers, so this clears exactly where the workers will register. AReaL keys records by the
OS user (`<user>/<experiment>/<trial>`): the controller's user, and the user the worker pods run as. Each of the
three must be one directory name (no '/', NUL, '.' or '..'), checked for all of them before anything is removed.
"""

from __future__ import annotations

import getpass
import importlib.util
import logging
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .. import naming

logger = logging.getLogger(__name__)


def flag_values(worker_flags: Sequence[str]) -> dict[str, str]:
    """`["--a", "1", "--b", "2"]` -> {"--a": "1", "--b": "2"}."""
    return {flag: str(value) for flag, value in zip(worker_flags[::2], worker_flags[1::2])}


def pod_users(manifests: Iterable[dict[str, Any]]) -> set[str]:
    """The USER the rendered worker containers run as (getpass.getuser() reads it in the workers)."""
    users = set()
    for manifest in manifests:
        if manifest.get("kind") != "StatefulSet":
            continue
        for container in manifest["spec"]["template"]["spec"].get("containers", []):
            users.update(e["value"] for e in container.get("env", []) if e.get("name") == "USER" and "value" in e)
    return users


class UnsafeRecordPath(ValueError):
    """A name that would make a trial's record path leave the record root; the message says which and why."""


def record_roots(experiment: str, trial: str, users: Iterable[str]) -> list[str]:
    """`<user>/<experiment>/<trial>` for each user, once every name is known to be one path component."""
    names = [("experiment", experiment), ("trial", trial), *(("user", user) for user in sorted(users))]
    for what, name in names:
        problem = naming.path_component_problem(what, name)
        if problem is not None:
            raise UnsafeRecordPath(f"name_resolve records not cleared: {problem}")
    return [f"{user}/{experiment}/{trial}" for user in sorted(set(users))]


def clear_trial(worker_flags: Sequence[str], experiment: str, trial: str, users: Iterable[str]) -> list[str]:
    """Removes the trial's records for each user; returns what was removed (where it could be reached). Raises
    UnsafeRecordPath, before removing anything, when a name is not one path component."""
    flags = flag_values(worker_flags)
    roots = record_roots(experiment, trial, {getpass.getuser(), *users})
    kind = flags.get("--name-resolve-type")
    if kind == "nfs":
        return _clear_nfs(Path(flags["--nfs-record-root"]), roots)
    if kind == "etcd3":
        return _clear_etcd3(flags["--etcd3-addr"], roots)
    return []


def _clear_nfs(record_root: Path, roots: list[str]) -> list[str]:
    cleared = []
    for root in roots:
        path = record_root / root
        if not path.resolve().is_relative_to(record_root.resolve()):  # a symlink on the way points elsewhere
            logger.warning("name_resolve records at %s are not cleared: it resolves outside %s", path, record_root)
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            cleared.append(str(path))
    if not record_root.is_dir():
        logger.info("name_resolve root %s is not visible from the controller; its trial records stay", record_root)
    return cleared


def _clear_etcd3(address: str, roots: list[str]) -> list[str]:
    if importlib.util.find_spec("areal") is None or importlib.util.find_spec("etcd3") is None:
        logger.warning(
            "name_resolve records in etcd3 at %s are not cleared: it needs areal and etcd3 installed "
            "in the controller's environment",
            address,
        )
        return []
    from areal.api.cli_args import NameResolveConfig
    from areal.utils import name_resolve

    repository = name_resolve.make_repository(NameResolveConfig(type="etcd3", etcd3_addr=address))
    for root in roots:
        repository.clear_subtree(root)
    return [f"etcd3://{address}/{root}" for root in roots]
