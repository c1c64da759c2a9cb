"""Where this checkout is and what `make venv`, `make tools` and `make areal-worker` put into it: the one
definition of these paths for the tools, the benchmarks, the examples and the tests.

tools/ is on the path of all of them without code of their own: a script in tools/ has it as sys.path[0], pytest
adds it (pyproject.toml's `pythonpath`), `make venv` puts it on the virtualenv's path (a .pth file), and `make demo`
gives AReaL's interpreter it on PYTHONPATH."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS_BIN = REPO / ".tools" / "bin"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
AREAL_WORKER_ENV = REPO / ".tools" / "areal-worker"
AREAL_WORKER_PYTHON = AREAL_WORKER_ENV / "bin" / "python"
# What a worker process needs on PYTHONPATH to import the localworker package (the stand-in worker server and the
# engines the tests create): its directory, tools/.
LOCALWORKER_PATH = REPO / "tools"
