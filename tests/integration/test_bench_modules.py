"""The benchmarks rpc_overhead, release_growth, controller_cost and detection of bench/ run end to end at their `tiny`
profile on the session's cluster, so their code cannot rot between benchmark runs. The tables they fill are checked,
never their timings.

Each makes namespaces of its own (private, so the cluster's podrunner leaves them alone); rpc_overhead runs its
stand-in guards with a podrunner of its own. controller_cost needs the cluster's KWOK to know the stage
pod-ready-kwok (tools/localkube/kwok-stages.yaml): a cluster started before it existed needs `make cluster-down` first.
"""

from __future__ import annotations

import os

import pytest

import controller_cost
import detection
import harness
import release_growth
import rpc_overhead

pytestmark = [
    pytest.mark.late,
    pytest.mark.skipif(
        bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")),
        reason="worker processes and KWOK nodes of the local cluster only",
    ),
]


def table(result: harness.Result, caption: str) -> harness.Table:
    return next(t for t in result.tables if t.caption.startswith(caption))


def verdicts_are_well_formed(result: harness.Result, count: int) -> None:
    assert len(result.targets) == count
    assert all(line.startswith(("met: ", "missed: ")) for line in result.targets)


def test_rpc_overhead_compares_adapter_guard_client_and_plain_calls(kubeconfig, tmp_path):
    steps: list[str] = []
    result = rpc_overhead.run("tiny", str(kubeconfig), steps.append, results_dir=tmp_path)

    latency = table(result, "Latency")
    assert [row[:2] for row in latency.rows] == [
        ["stand-in guard x2", "call_engine"],
        ["stand-in guard x2", "async_call_engine"],
    ]
    assert len(latency.columns) == len(latency.rows[0]) == 13
    for row in latency.rows:
        p50s, throughputs = row[2:7], row[10:13]
        assert all(value > 0 for value in [*p50s, *throughputs])
        assert row[9] > 0  # the scheduler's own part of a call, timed inside it
    scaling = table(result, "Concurrency scaling")
    assert [(row[0], row[1]) for row in scaling.rows] == [("stand-in guard x2", 1), ("stand-in guard x2", 2)]
    assert scaling.rows[0][4] == scaling.rows[0][5] == 1.0  # speedups are relative to one worker
    verdicts_are_well_formed(result, 5)  # throughput and overhead per API, scaling
    assert (tmp_path / "rpc_overhead.png").stat().st_size > 0 and result.plots == [str(tmp_path / "rpc_overhead.png")]
    assert result.machine["loadavg_start"] and result.name == rpc_overhead.NAME
    assert steps and all(step.startswith("stand-in guard: ") for step in steps)


def test_release_growth_records_upgrades_secret_sizes_and_history(kubeconfig, tmp_path):
    result = release_growth.run("tiny", str(kubeconfig), lambda _: None, results_dir=tmp_path)

    growth = table(result, "Growth in roles")
    assert [(row[0], row[1]) for row in growth.rows] == [("roles", 1), ("roles", 2), ("replicas", 1), ("replicas", 2)]
    for series, x, upgrade, operation, secret_kib, percent, kept, kept_kib in growth.rows:
        assert 0 < upgrade <= operation and secret_kib > 0 and 0 < percent < 100
        assert kept == x if series == "roles" else kept >= 1  # one revision per role so far
        assert kept_kib >= secret_kib
    revisions = table(result, "Growth in revisions")
    assert [row[0] for row in revisions.rows] == [1, 2, 3]
    assert [row[3] for row in revisions.rows] == [1, 2, 3]  # below history_max: every revision is kept
    verdicts_are_well_formed(result, 3)
    assert (tmp_path / "release_growth.png").stat().st_size > 0


def test_controller_cost_reports_each_phase(kubeconfig, tmp_path):
    settings = controller_cost.PROFILES["tiny"]
    result = controller_cost.run("tiny", str(kubeconfig), lambda _: None, results_dir=tmp_path)

    phases = table(result, "Per phase")
    names = [row[0] for row in phases.rows]
    assert names == [
        "build the scheduler",
        f"create_workers x1 ({settings.workers} workers)",
        "get_workers, waiting for Ready",
        *[f"get_workers again ({n})" for n in range(1, settings.repeats + 1)],
        "delete_workers",
    ]
    for _name, wall, cpu, helm_cpu, rss, _growth, peak in phases.rows:
        assert wall > 0 and cpu >= 0 and helm_cpu >= 0 and 0 < rss <= peak
    assert table(result, "Per phase").rows[1][3] > 0  # create_workers ran helm
    [[pods, kib, per_pod, annotations_kib, fits, render_ms, parse_ms]] = table(result, "The ready-pods record").rows
    assert pods == settings.workers and 0 < kib <= annotations_kib and per_pod > 0
    assert fits > settings.workers and render_ms > 0 and parse_ms > 0
    # one role: get_workers wrote the record once, with every worker
    assert [row[1] for row in table(result, "Each write of the ready-pods record").rows] == [settings.workers]
    assert (tmp_path / "controller_cost.png").stat().st_size > 0


def test_detection_times_each_fault_and_its_rollback(kubeconfig, tmp_path):
    steps: list[str] = []
    result = detection.run("tiny", str(kubeconfig), steps.append, results_dir=tmp_path)

    (latency,) = result.tables
    assert [row[0] for row in latency.rows] == list(detection.FAULTS)
    for fault, *numbers in latency.rows:
        detection_median, _, _, rollback_median, _, _ = numbers
        assert detection_median >= 0 and rollback_median > 0, fault
    verdicts_are_well_formed(result, 1)
    assert len(steps) == len(detection.FAULTS)
    assert (tmp_path / "detection.png").stat().st_size > 0
