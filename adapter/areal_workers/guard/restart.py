"""Restarting a worker's process in place through AReaL's own guard API: no `pods/exec`, no component of ours in the
worker's image.

AReaL's POST /fork starts a command as a child of the guard (under bash, which streams the child's output to the
guard's log). The child sent here walks up its ancestors to the first one that is not a shell, which is the guard
(the process that forked it), and sends it SIGTERM. AReaL's guard turns SIGTERM into its own shutdown: engines'
destroy hooks, forked children killed, exit. Workers run with restartPolicy Always, so the kubelet then starts the
container again in the same pod: same node, same GPUs, same IP, the same Kueue admission, and a fresh guard.
"""

from __future__ import annotations

import logging

import aiohttp

from ..areal_types import Worker
from ..errors import RPCConnectionError
from .client import GuardClient

logger = logging.getLogger(__name__)

RESTART_FORK_ROLE = "areal-workers-restart"  # the /fork `role` of the child that stops its guard

# Shells between the guard and this child: AReaL runs /fork commands as `bash -c "stdbuf -oL CMD | tee ..."`.
_STOP_GUARD = (  # one line: the guard logs the command lines it forks
    "pid=$$; while :; do parent=; "
    'while read -r key value; do if [ "$key" = PPid: ]; then parent=$value; break; fi; done < "/proc/$pid/status"; '
    'if [ -z "$parent" ] || [ "$parent" -lt 1 ]; then echo "areal-workers: no guard process above pid $$" >&2; '
    'exit 1; fi; pid=$parent; read -r name < "/proc/$pid/comm"; '
    "case $name in bash|sh|dash|stdbuf|tee) ;; *) break ;; esac; done; "
    'echo "areal-workers: restarting this worker for a new trainer: SIGTERM to its guard (pid $pid, $name)"; '
    'kill -TERM "$pid"'
)


def stop_guard_argv() -> list[str]:
    """The /fork command line whose process stops the guard that forked it."""
    return ["bash", "-c", _STOP_GUARD, RESTART_FORK_ROLE]


async def stop_guard(guard: GuardClient, worker: Worker, index: int) -> None:
    """Asks `worker`'s guard to fork the child that stops it. A guard whose connection closes or resets once it was
    reached was asked all the same: AReaL's guard exits on SIGTERM without finishing the requests in flight, so the
    child may stop it before the /fork reply is written. Whether it stopped is seen in the pod (its container
    restarts). A guard that could not be reached, timed out or refused raises RPCConnectionError or ForkError as
    GuardClient.fork does."""
    try:
        await guard.fork(worker, RESTART_FORK_ROLE, index, stop_guard_argv())
    except RPCConnectionError as error:
        if not _lost_after_connecting(error.__cause__):
            raise
        logger.info("guard of %s closed the connection before its /fork reply: it is stopping", worker.id)


def _lost_after_connecting(cause: BaseException | None) -> bool:
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return True
    return isinstance(cause, aiohttp.ClientOSError) and not isinstance(cause, aiohttp.ClientConnectorError)
