"""CPU engines for AReaL's real worker server (`python -m areal.infra.rpc.rpc_server`), for the conformance lane.

AReaL's POST /create_engine imports the class by path and accepts only subclasses of `areal.api.TrainEngine` or
`areal.api.InferenceEngine` (areal/infra/rpc/guard/engine_blueprint.py). `Counter` is such a TrainEngine with the
probes of `localworker.engines.Counter` (the same `CounterProbes`, so the scheduler suite runs unchanged
on both workers) plus a few more. It needs the AReaL worker environment (`make areal-worker`); worker processes
import it as `localworker.areal_engines.Counter` through PYTHONPATH (tools/), set by podrunner.
"""

from __future__ import annotations

import abc
import os
import sys
from collections.abc import Callable
from typing import Any

from areal.api import TrainEngine

from localworker.engines import CounterProbes


def _unavailable(name: str) -> Callable[..., Any]:
    def method(self: object, *args: object, **kwargs: object) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.{name}: a CPU test engine has no model or process group")

    method.__name__ = name
    return method


def _fill_abstract_api(cls: type) -> type:
    """Gives every still-abstract member of TrainEngine a body that raises NotImplementedError (a property stays
    a property), so the class can be instantiated whatever AReaL's version adds to the abstract API."""
    for name in sorted(cls.__abstractmethods__):
        member = _unavailable(name)
        setattr(cls, name, property(member) if isinstance(getattr(TrainEngine, name, None), property) else member)
    abc.update_abstractmethods(cls)
    return cls


@_fill_abstract_api
class Counter(CounterProbes, TrainEngine):
    """A counter plus probes into the worker process that hosts it."""

    @property
    def initialized(self) -> bool:
        # Never initialized: AReaL's /call then neither broadcasts arguments over process groups nor asks
        # is_data_parallel_head(), neither of which exists without torch.distributed.
        return False

    # --- probes beyond CounterProbes ------------------------------------------------------------------------

    def ping(self) -> str:
        return "pong"

    def add(self, a: float, b: float) -> float:
        return a + b

    def echo(self, value: Any) -> Any:
        return value

    def get_env(self, name: str) -> str | None:
        return os.environ.get(name)

    def argv(self) -> list[str]:
        """The server's command line: the flags the chart (or a fork) really started it with."""
        return sys.argv[1:]

    def name_records(self, root: str) -> list[str]:
        """What AReaL's name_resolve, as the server configured it (nfs or etcd3), holds under `root`."""
        from areal.utils import name_resolve

        return sorted(name_resolve.get_subtree(root))

    def parent_command(self) -> list[str]:
        """The command line of the process that started the server (podrunner's fork server on KWOK pods)."""
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
            return [part.decode() for part in cmdline.read().split(b"\0") if part]


class Broken(Counter):
    """An engine whose constructor always raises, for the server's 500 path."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("Broken engine refuses to start")
