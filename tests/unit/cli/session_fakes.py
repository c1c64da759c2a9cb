"""What the cli tests' fake sessions share: the parts of cli.session.Session every command goes through, answered
without a cluster (the release's name; helm coroutines run to their end, since the fakes never wait; Kubernetes calls
made as they are)."""

from __future__ import annotations

from typing import Any

RELEASE = "aw-exp-t-1a2b3c4d"


class SessionCalls:
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
