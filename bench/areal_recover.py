"""AReaL's recover on Kubernetes, timed: the kill of a trainer to its next attempt's first resumed step, side by side
with the cold start of the same run (submit to the first step). The run is the serial-node lane's
tests/integration/test_areal_trainer_job.py: the stock SFT trainer as a `submit` Job on the real node, recover.mode
on, its pod deleted after its first step and the next attempt SIGKILLed after its first; the test prints its times,
which this script collects over repeats.

    python bench/areal_recover.py [--repeats 1]   # on the running local cluster, with --real-node

Not part of `make bench` (the real node needs root and runs one per machine). The result is saved as
bench/results/areal_recover.json, which bench/report.py renders into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

from harness import Table, real_node_result, save
from repo_paths import REPO

TEST = "tests/integration/test_areal_trainer_job.py"
TIMES = re.compile(
    r"submit -> first step \(cold start\): (\d+)s; pod deleted -> first resumed step: (\d+)s; "
    r"SIGKILL -> first resumed step: (\d+)s"
)


def one_run() -> tuple[int, int, int]:
    run = subprocess.run(
        [str(REPO / ".venv" / "bin" / "pytest"), "-q", "-s", "-p", "no:cacheprovider", TEST],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "PATH": f"{REPO / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}"},
    )
    found = TIMES.search(run.stdout + run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"{TEST} failed (exit {run.returncode}):\n{(run.stdout + run.stderr)[-4000:]}")
    cold, deleted, killed = (int(value) for value in found.groups())
    return cold, deleted, killed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeats):
        runs.append(one_run())
        print(f"cold start {runs[-1][0]}s, pod deleted -> resumed {runs[-1][1]}s, SIGKILL -> resumed {runs[-1][2]}s")
    medians = [statistics.median(run[i] for run in runs) for i in range(3)]
    result = real_node_result(
        "areal_recover",
        "AReaL's recover: a killed trainer's next attempt against a cold start",
        (
            "The stock AReaL SFT trainer as an `areal-workers submit` Job on the real node (one FSDP worker on CPU, "
            "recover.mode on, a recover checkpoint after every step, lease grace 8 s, restarts 2). Cold start: "
            "submit to the first step done. Then its pod is deleted (1 s grace) after that step, and the next "
            "attempt's processes are SIGKILLed after its first: each time, to the next attempt's first resumed step "
            "(the Job's back-off, 10 s then 20 s, the Lease watch, 4 s, the trainer's start and AReaL's recover, and "
            "the worker restarted in place). The worker pod is scheduled once for the whole run."
        ),
        f"areal_recover.py --repeats {args.repeats}",
        Table(
            caption=f"seconds (median of {args.repeats})",
            columns=["cold start", "pod deleted -> resumed", "SIGKILL -> resumed"],
            rows=[medians],
        ),
    )
    print(save(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
