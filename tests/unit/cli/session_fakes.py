"""What the cli tests' fake sessions share: the parts of cli.session.Session every command goes through, answered
without a cluster (the release's name; helm coroutines run to their end, since the fakes never wait; Kubernetes calls
made as they are)."""

from __future__ import annotations

from typing import Any

from memory_backend import MemoryLeases

RELEASE = "aw-exp-t-1a2b3c4d"


class SessionCalls:
    trainer_leases: MemoryLeases | None = None  # the namespace's Leases (None: none)

    def leases(self) -> MemoryLeases:
        if self.trainer_leases is None:
            self.trainer_leases = MemoryLeases()
        return self.trainer_leases

    def release(self) -> str:
        return RELEASE

    def helm(self, coroutine: Any, doing: str) -> Any:
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value
        raise AssertionError("the fake's coroutines never wait")

    def kube(self, call: Any, doing: str, *args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)
