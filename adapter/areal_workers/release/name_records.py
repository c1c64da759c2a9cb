"""Clearing a trial's name_resolve records before its first workers start, as AReaL's schedulers do at start.

Stale records of an earlier run of the same trial would point peers at dead addresses. The flags are the ones the
chart renders for the workers, so this clears exactly where the workers will register. AReaL keys records by the
OS user (`<user>/<experiment>/<trial>`): the controller's user, and the user the worker pods run as. Each of the
three must be one directory name (no '/', NUL, '.' or '..'), checked for all of them before anything is removed.
Below the record root no symbolic link is followed (each directory is opened relative to its parent, without following
a link): a link at `<user>` or `<experiment>` leaves that trial's records as they are, and one at the trial's directory
or inside it is removed as a link, so a link planted in the shared root cannot turn the cleanup onto another trial's
records.
"""

from __future__ import annotations

import errno
import getpass
import importlib.util
import logging
import os
import stat
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
    users: set[str] = set()
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
    cleared: list[str] = []
    if not record_root.is_dir():
        logger.info("name_resolve root %s is not visible from the controller; its trial records stay", record_root)
        return cleared
    for root in roots:
        try:
            if _clear_below(record_root, root.split("/")):
                cleared.append(str(record_root / root))
        except _LinkOnTheWay as link:
            logger.warning(
                "name_resolve records at %s are not cleared: %s is a symbolic link (or not a directory), and "
                "records are never cleared through one; remove it if it should not be there",
                record_root / root,
                link.path,
            )
        except OSError as error:  # records of a shared root this user may not remove: the workers overwrite them
            logger.warning("name_resolve records at %s are not all cleared: %s", record_root / root, error)
    return cleared


class _LinkOnTheWay(Exception):
    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path


_NO_FOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _clear_below(record_root: Path, parts: list[str]) -> bool:
    """Removes `<record_root>/<parts...>` (the record root itself may be a link: it is the configured one); the
    directories on the way are opened without following links, each relative to the one before. Whether there was
    anything to remove; raises _LinkOnTheWay when a directory on the way is a link."""
    *parents, last = parts
    fd = os.open(record_root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        where = record_root
        for part in parents:
            where = where / part
            try:
                child = os.open(part, _NO_FOLLOW, dir_fd=fd)
            except FileNotFoundError:
                return False
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _LinkOnTheWay(where) from None
                raise
            os.close(fd)
            fd = child
        try:
            os.stat(last, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        _remove(fd, last)
        return True
    finally:
        os.close(fd)


def _remove(parent: int, name: str) -> None:
    """Removes `name` in the directory `parent`: a link or a file is unlinked, a directory emptied the same way
    first; no link is ever followed."""
    if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = os.open(name, _NO_FOLLOW, dir_fd=parent)
    try:
        with os.scandir(fd) as entries:
            names = [entry.name for entry in entries]
        for child in names:
            _remove(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


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
