"""bench/report.py renders RESULTS.md from stored results; the counting helpers of the benchmarks parse what the
apiserver and the Kubernetes client say."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

import api_economy
import apiserver_metrics
import harness
import report
import request_counts
import run
import startup


def synthetic(name: str = "startup", date: str = "2026-01-02 03:04 UTC") -> harness.Result:
    return harness.Result(
        name=name,
        title="Worker start-up: create_workers + get_workers against the floor",
        summary="Seconds from the first create_workers to the last get_workers.",
        command=f"python bench/run.py --profile quick --only {name}",
        profile="quick",
        tables=[harness.Table("KWOK readiness", ["N", "adapter s", "note"], [[1, "2.10", "a|b"], [128, "9.50", ""]])],
        plots=[f"results/{name}.png"],
        targets=["met: adapter/floor ratio 1.10 at N=128; target <= 1.15", "missed: growth N^1.30; target <= 1.1"],
        date=date,
        machine={
            "cpus": 2,
            "cpu_model": "Test CPU",
            "memory_gib": 23.4,
            "python": "3.11.7",
            "kernel": "6.1",
            "load_average": [1.5, 2.25, 3.0],
        },
    )


def test_results_survive_a_save_and_load(tmp_path):
    result = synthetic()
    path = harness.save(result, tmp_path)
    assert path == tmp_path / "startup.json"
    assert harness.load(path) == result


def test_a_file_that_is_no_result_is_named_not_skipped(tmp_path):
    """A record of another shape (as bench/real_node_startup.py wrote before it saved Results) fails the report
    with the file's name, instead of Result's TypeError or silently leaving it out of RESULTS.md."""
    harness.save(synthetic(), tmp_path)
    (tmp_path / "real-node-startup-cpu1.json").write_text('{"repeats": 3, "median": {"real": 14.6}}')
    with pytest.raises(
        harness.NotAResult, match=r"real-node-startup-cpu1\.json: .*unknown fields \['median', 'repeats'\]"
    ):
        report.load_all(tmp_path)
    (tmp_path / "real-node-startup-cpu1.json").write_text("[1, 2]")
    with pytest.raises(harness.NotAResult, match="a list, not a benchmark Result"):
        report.load_all(tmp_path)


def test_every_committed_result_loads_and_renders_into_results_md(tmp_path):
    committed = sorted(harness.RESULTS.glob("*.json"))
    results = report.load_all()
    assert [r.name for r in results] == [path.stem for path in committed]
    text = report.write(harness.RESULTS, tmp_path / "RESULTS.md").read_text()
    for result in results:
        assert f"\n## {result.title}\n" in text
        assert all(f"**{table.caption}**" in text for table in result.tables)
        assert all((harness.BENCH / plot).is_file() for plot in result.plots)


def test_the_real_node_start_up_is_saved_as_a_result(tmp_path):
    import real_node_startup

    result = real_node_startup.result({"real": [13.3, 15.5, 14.6], "kwok": [9.2, 9.7, 9.4]}, 3, 0.25, "2026-12-01")
    assert harness.load(harness.save(result, tmp_path)) == result
    assert result.name == "real-node-startup-cpu0.25" and result.profile == "real-node"
    assert result.tables[0].rows == [["real", "13.3, 15.5, 14.6", 14.6], ["kwok", "9.2, 9.7, 9.4", 9.4]]
    assert "Median ratio real / KWOK: 1.55." in result.summary


def test_the_report_holds_every_part_of_a_result(tmp_path):
    harness.save(synthetic(), tmp_path)
    out = report.write(tmp_path, tmp_path / "RESULTS.md")
    text = out.read_text()
    assert text.startswith("# areal-workers benchmarks\n")
    assert "## Worker start-up: create_workers + get_workers against the floor" in text
    assert "Seconds from the first create_workers to the last get_workers." in text
    assert "- ✅ met: adapter/floor ratio 1.10 at N=128; target <= 1.15" in text
    assert "- ❌ missed: growth N^1.30; target <= 1.1" in text
    assert (
        "**KWOK readiness**\n\n| N | adapter s | note |\n|---|---|---|\n| 1 | 2.10 | a\\|b |\n| 128 | 9.50 |  |" in text
    )
    assert "![startup](results/startup.png)" in text
    assert "Command: `python bench/run.py --profile quick --only startup`" in text
    assert "| load average (1, 5, 15 min) | 1.5, 2.25, 3.0 |" in text
    assert "| CPU model | Test CPU |" in text
    assert "profile `quick`, load average 1.5, 2.25, 3.0 at the end" in text
    overview = (
        "| [Worker start-up: create_workers + get_workers against the floor]"
        "(#worker-start-up-create_workers--get_workers-against-the-floor) | quick | 2026-01-02 03:04 UTC | "
        "1 met, 1 missed |"
    )
    assert overview in text


def test_the_report_takes_the_machine_of_the_newest_result_and_lists_every_benchmark():
    older = synthetic("api_economy", "2026-01-01 00:00 UTC")
    older.machine = {**older.machine, "cpus": 64}
    text = report.render([older, synthetic()], generated="2026-01-03 00:00 UTC")
    assert "Of the newest result (2026-01-02 03:04 UTC)" in text
    assert "| CPUs | 2 |" in text and "| CPUs | 64 |" not in text
    assert text.count("\n## Worker start-up") == 2
    assert "Generated 2026-01-03 00:00 UTC" in text


def test_an_empty_results_directory_says_how_to_fill_it():
    assert "No results yet: run `make bench`." in report.render([], generated="now")


def test_machine_info_records_the_load_average():
    info = harness.machine_info()
    assert len(info["load_average"]) == 3 and info["cpus"] >= 1


METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="404",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 9
apiserver_flowcontrol_dispatched_requests_total{flow_schema="service-accounts",priority_level="workload-low"} 12
apiserver_flowcontrol_dispatched_requests_total{flow_schema="exempt",priority_level="exempt"} 40
apiserver_request_duration_seconds_bucket{verb="LIST",le="0.1"} 5
"""


def test_apiserver_counters_by_verb_and_resource_and_by_flow_schema():
    snapshot = apiserver_metrics.parse(METRICS)
    assert snapshot.requests == {("LIST", "pods"): 8, ("POST", "pods/binding"): 3}  # non-resource requests left out
    assert snapshot.controller == 12 and snapshot.flows["exempt"] == 40
    later = apiserver_metrics.parse(METRICS.replace("} 7", "} 10").replace("} 12", "} 15"))
    delta = later - snapshot
    assert delta.requests == {("LIST", "pods"): 3} and delta.total == 3 and delta.controller == 3


@pytest.mark.parametrize(
    ("method", "url", "expected"),
    [
        ("GET", "https://h/api/v1/namespaces/ns/pods?labelSelector=a%3Db", ("LIST", "pods")),
        ("GET", "https://h/api/v1/namespaces/ns/pods?watch=True&resourceVersion=5", ("WATCH", "pods")),
        ("GET", "https://h/api/v1/namespaces/ns/pods/p-0/log?tailLines=20", ("GET", "pods/log")),
        ("PATCH", "https://h/api/v1/namespaces/ns/configmaps/topology", ("PATCH", "configmaps")),
        ("GET", "https://h/apis/apps/v1/namespaces/ns/statefulsets/s", ("GET", "statefulsets")),
        ("PATCH", "https://h/apis/apps/v1/namespaces/ns/statefulsets/s/scale", ("PATCH", "statefulsets/scale")),
        ("GET", "https://h/api/v1/nodes", ("LIST", "nodes")),
        ("GET", "https://h/api/v1/namespaces/ns", ("GET", "namespaces")),
        ("DELETE", "https://h/api/v1/namespaces/ns/pods", ("DELETECOLLECTION", "pods")),
    ],
)
def test_kubernetes_client_requests_are_named_as_the_apiserver_names_them(method, url, expected):
    assert request_counts.kube_verb_resource(method, url) == expected


def test_every_registered_benchmark_is_a_module_with_its_name_and_profiles():
    import importlib

    for name in run.BENCHMARKS:
        module = importlib.import_module(name)
        assert module.NAME == name and callable(module.run)
        assert {"quick", "full"} <= set(getattr(module, "PROFILES", {"quick": 0, "full": 0}))


def startup_point(series: str, n: int, roles: int, adapter: float, floor: float) -> startup.Point:
    return startup.Point(series, n, roles, adapter=[adapter], floor=[floor])


def test_the_startup_targets_judge_the_small_experiments_against_their_own_limits():
    points = [
        startup_point("kwok", 16, 4, 1.9, 0.67),  # 2.84x: within 3x
        startup_point("kwok", 16, 1, 0.9, 0.9),
        startup_point("guards", 1, 1, 0.6, 0.37),  # 1.62x: over 1.5x
    ]
    targets = startup._targets(points)
    assert "met: adapter/floor ratio 2.84 at N=16 (4 role(s), KWOK readiness); target <= 3.0 (a small experiment)" in (
        targets
    )
    assert "missed: adapter/floor ratio 1.62 at N=1 (1 role(s), real guards); target <= 1.5 (a small experiment)" in (
        targets
    )


def test_the_get_workers_target_leaves_out_the_trainers_lease_heartbeat():
    """Lease renewals come every few seconds whatever the scheduler does: a 50-second wait has ten, a short one
    none. The target counts the rest."""

    def sample(n: int, identity: int, renewals: int) -> api_economy.Sample:
        lease = Counter({("GET", "leases"): renewals // 2, ("PUT", "leases"): renewals - renewals // 2})
        return api_economy.Sample(
            n,
            server={"get_workers": SimpleNamespace(controller=identity)},  # type: ignore[dict-item]
            client={"get_workers": Counter({("LIST", "pods"): 1}) + lease},
        )

    met = api_economy._targets([sample(1, 3, 0), sample(1024, 15, 10)], [])
    assert met[0].startswith("met: get_workers costs 3..5 apiserver requests")
    missed = api_economy._targets([sample(1, 3, 0), sample(1024, 15, 2)], [])
    assert missed[0].startswith("missed: get_workers costs 3..13")
