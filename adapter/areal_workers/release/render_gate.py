"""The preflight checks run on the render of the upgrade itself: one helm process per change instead of a `helm
template` before the `helm upgrade`.

helm 3 hands the manifests it is about to apply to a post-renderer on stdin and applies what it prints. The one given
here is /bin/sh with a script (no file of ours to install or make executable): it saves the manifests in a private
directory, says so through a FIFO, and blocks on a second FIFO for the scheduler's verdict. On "apply" it prints them
unchanged; on anything else it prints the refusal to stderr and exits 1, and helm stops before it writes a revision or
touches an object. The scheduler holds both FIFOs open for reading and writing, so neither side's open blocks, and
closing them ends a script whose helm is gone (its read sees the end of the FIFO).

helm 4 takes post-renderers only as plugins; with it the checks keep their own `helm template` (Releases.post_renders).
"""

from __future__ import annotations

import os
import select
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

APPLY = "apply"
POLL_SECONDS = 0.05  # how often a wait for the render also looks whether helm ended without one
_SCRIPT = (
    'cat > "$1/manifests" && echo rendered > "$1/rendered" && IFS= read -r verdict < "$1/verdict" || exit 1; '
    'if [ "$verdict" = apply ]; then exec cat "$1/manifests"; fi; printf "%s\\n" "$verdict" >&2; exit 1'
)


class RenderGate:
    """One upgrade's post-renderer and the scheduler's side of it. Use as a context manager: leaving it closes the
    FIFOs (a waiting script then exits) and removes the directory."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="areal-workers-render-"))
        os.mkfifo(self.directory / "rendered", 0o600)
        os.mkfifo(self.directory / "verdict", 0o600)
        self._rendered = os.open(self.directory / "rendered", os.O_RDWR | os.O_NONBLOCK)
        self._verdict = os.open(self.directory / "verdict", os.O_RDWR | os.O_NONBLOCK)

    def helm_flags(self) -> list[str]:
        """What `helm upgrade` takes to run the script as its post-renderer."""
        arguments = ["-c", _SCRIPT, "areal-workers-post-render", str(self.directory)]
        return ["--post-renderer", "/bin/sh", *(f for a in arguments for f in ("--post-renderer-args", a))]

    def wait_rendered(self, ended: Callable[[], bool], loader: type[yaml.SafeLoader]) -> list[dict[str, Any]] | None:
        """The manifests helm is about to apply, once it rendered them; None when `ended()` says helm ended first
        (a chart or values error: its own error says why)."""
        while not select.select([self._rendered], [], [], POLL_SECONDS)[0]:
            if ended():
                return None
        os.read(self._rendered, 64)
        text = (self.directory / "manifests").read_bytes()
        return [m for m in yaml.load_all(text, Loader=loader) if m]

    def answer(self, verdict: str) -> None:
        """Lets helm apply the render (APPLY), or refuses it with `verdict` (one line of helm's error)."""
        os.write(self._verdict, (" ".join(verdict.split()) + "\n").encode())

    def close(self) -> None:
        for descriptor in (self._rendered, self._verdict):
            os.close(descriptor)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RenderGate:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
