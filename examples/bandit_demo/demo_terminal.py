"""Terminal output of the bandit demo: numbered steps, result lines, tables and a progress line while it waits.

Standard library only. On a terminal, a wait shows a spinner with what the cluster reports (e.g. "1/2 ready");
when the output is a file or a pipe, only the result lines are printed, so logs stay short.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
INDENT = "   "


class Terminal:
    def __init__(self, stream: TextIO = sys.stdout, color: bool | None = None) -> None:
        self.stream = stream
        self.interactive = stream.isatty()
        self.color = self.interactive if color is None else color
        self.step_number = 0

    # --- text --------------------------------------------------------------------------------------------

    def _style(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def bold(self, text: str) -> str:
        return self._style(text, "1")

    def dim(self, text: str) -> str:
        return self._style(text, "2")

    def say(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def title(self, text: str) -> None:
        self.say(self.bold(text))

    def field(self, name: str, value: str) -> None:
        self.say(f"  {name:<10} {value}")

    def step(self, title: str, detail: str = "") -> None:
        self.step_number += 1
        self.say()
        self.say(self.bold(f"{self.step_number}. {title}") + (f" {self.dim('— ' + detail)}" if detail else ""))

    def ok(self, text: str, seconds: float | None = None) -> None:
        took = f"  {self.dim(f'{seconds:.1f}s')}" if seconds is not None else ""
        self.say(f"{INDENT}{self._style('✓', '32')} {text}{took}")

    def note(self, text: str) -> None:
        self.say(f"{INDENT}{self.dim(text)}")

    def quote(self, lines: Sequence[str], limit: int = 14) -> None:
        """Lines of someone else's text (an exception, a diagnosis), marked as such."""
        shown = list(lines)[:limit]
        for line in shown:
            self.say(f"{INDENT}  {self.dim('│')} {line}")
        if len(lines) > limit:
            self.say(f"{INDENT}  {self.dim('│')} … ({len(lines) - limit} more lines)")

    def fail(self, text: str) -> None:
        self.say(f"{INDENT}{self._style('✗', '31')} {text}")

    def table(self, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
        widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
        for index, row in enumerate(cells):
            line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
            self.say(f"{INDENT}{self.dim(line) if index == 0 else line}")

    # --- waiting -----------------------------------------------------------------------------------------

    @contextmanager
    def waiting(self, what: str, status: Callable[[], str] | None = None, poll: float = 0.5) -> Iterator[None]:
        """A spinner line `what · <status()> · 7.4s` while the block runs (on a terminal only). status() is
        called from a helper thread every `poll` seconds; its errors are shown, not raised."""
        if not self.interactive:
            yield
            return
        done = threading.Event()
        thread = threading.Thread(target=self._spin, args=(what, status, poll, done), daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _spin(self, what: str, status: Callable[[], str] | None, poll: float, done: threading.Event) -> None:
        started = time.monotonic()
        shown, next_poll, frame = "", 0.0, 0
        while not done.wait(0.1):
            now = time.monotonic()
            if status is not None and now >= next_poll:
                shown, next_poll = _safe(status), now + poll
            text = f"{what} · {shown} · {now - started:.1f}s" if shown else f"{what} · {now - started:.1f}s"
            self.stream.write(f"\r\033[K{INDENT}{SPINNER[frame % len(SPINNER)]} {text}")
            self.stream.flush()
            frame += 1
        self.stream.write("\r\033[K")
        self.stream.flush()


def _safe(status: Callable[[], str]) -> str:
    try:
        return status()
    except Exception as error:  # noqa: BLE001 - a progress line must never break the demo
        return f"(cannot read status: {type(error).__name__})"
