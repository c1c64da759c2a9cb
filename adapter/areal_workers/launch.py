"""Runs an unmodified AReaL entry point with the Kubernetes scheduler registered.

    python -m areal_workers.launch SCRIPT.py [ARGS...]       e.g. AReaL's examples/math/gsm8k_rl.py --config ...
    python -m areal_workers.launch -m MODULE [ARGS...]       a trainer module, run as `python -m MODULE` runs it

AReaL's trainers pick their scheduler from `scheduler.type` in an if/elif chain that knows local, ray and slurm;
an entry script written for AReaL never calls `areal_workers.register_with_areal()`, so `scheduler.type=kubernetes`
would end in AReaL's `NotImplementedError: Unknown scheduler type`. This launcher registers the scheduler, then runs
the script or module as Python would (`__main__`, its own sys.argv). The scheduler's settings come from the
AREAL_K8S_* environment variables (docs/en/configuration.md); they are checked before the script starts, so a
misspelt setting fails in a second rather than after the models have loaded.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Sequence

from .config import ConfigError, KubernetesSchedulerConfig
from .trainer_hook import register_with_areal

USAGE = (
    "usage: python -m areal_workers.launch SCRIPT.py [ARGS...]\n"
    "       python -m areal_workers.launch -m MODULE [ARGS...]"
)
EXIT_USAGE = 2


class LaunchError(Exception):
    """What the launcher refuses, with what to change."""


def parse(argv: Sequence[str]) -> tuple[str | None, str | None, list[str]]:
    """(module, script, the entry point's own arguments)."""
    if not argv or argv[0] in ("-h", "--help"):
        raise LaunchError(USAGE)
    if argv[0] == "-m":
        if len(argv) < 2 or argv[1].startswith("-"):
            raise LaunchError(f"-m needs a module name\n{USAGE}")
        return argv[1], None, list(argv[2:])
    if argv[0].startswith("-"):
        raise LaunchError(
            f"unknown option {argv[0]}: the launcher takes a script or -m MODULE, then the entry "
            f"point's own arguments\n{USAGE}"
        )
    if not os.path.isfile(argv[0]):
        raise LaunchError(f"no such script: {argv[0]}")
    return None, argv[0], list(argv[1:])


def prepare() -> list[str]:
    """Checks the AREAL_K8S_* settings and registers the scheduler with AReaL's trainers; their names."""
    try:
        KubernetesSchedulerConfig.from_env()
    except ConfigError as error:
        raise LaunchError(f"the AREAL_K8S_* settings are invalid: {error}") from None
    patched = register_with_areal()
    if not patched:
        raise LaunchError(
            f"AReaL's trainers cannot be imported by {sys.executable}: run the launcher with the "
            f"interpreter that has AReaL (areal and torch) installed"
        )
    return patched


def main(argv: Sequence[str] | None = None) -> int:
    try:
        module, script, arguments = parse(sys.argv[1:] if argv is None else argv)
        prepare()
    except LaunchError as error:
        print(f"areal_workers.launch: {error}", file=sys.stderr)
        return EXIT_USAGE
    if module is not None:
        sys.argv = [module, *arguments]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        assert script is not None
        sys.argv = [script, *arguments]
        sys.path[0] = os.path.dirname(os.path.abspath(script))  # what `python SCRIPT` puts first
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
