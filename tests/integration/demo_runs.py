"""What the tests of `make demo` share (test_demo.py: a fresh clone's `make demo`; test_demo_in_cluster.py: the demo
as a trainer pod): the program, the steps its output names, and the look for processes its trial left."""

from __future__ import annotations

import time
from pathlib import Path

from repo_paths import REPO

DEMO = REPO / "examples" / "bandit_demo" / "demo.py"
STEPS = [
    "1. Create the workers",
    "2. Fork a role into the actor's pods",
    "3. Workers",
    "4. Engines",
    "5. Train",
    "6. A bad update, diagnosed and rolled back",
    "7. helm history",
    "8. Clean up",
]


def trial_processes(trial: str) -> list[str]:
    """Command lines of live processes started for the trial (worker servers and their forks carry
    `--trial-name <trial>`)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(a == "--trial-name" and b == trial for a, b in zip(argv, argv[1:])):
            found.append(" ".join(argv).strip())
    return found


def wait_for_no_processes(trial: str, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := trial_processes(trial)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left
