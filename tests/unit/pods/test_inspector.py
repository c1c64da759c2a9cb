"""Log lines that reach a diagnosis are plain text."""

from __future__ import annotations

from types import SimpleNamespace

from areal_workers.pods.inspector import ReleaseInspector


class ColouredLogs:
    """The one call of CoreV1Api the log readers make, answering as AReaL's colorlog writes."""

    def read_namespaced_pod_log(self, name: str, namespace: str, **options: object) -> str:
        return "\x1b[32m(AReaL) INFO\x1b[0m: started\n\x1b[1;31mERROR\x1b[0m: boom\n"


def test_colour_codes_are_stripped_from_log_lines():
    inspector = ReleaseInspector(ColouredLogs(), "ns", "rel")  # type: ignore[arg-type]
    pod = SimpleNamespace(metadata=SimpleNamespace(name="p"))
    expected = ["(AReaL) INFO: started", "ERROR: boom"]
    assert inspector.log_tail(pod) == expected  # type: ignore[arg-type]
    assert inspector.log_lines(pod, 10) == expected  # type: ignore[arg-type]
