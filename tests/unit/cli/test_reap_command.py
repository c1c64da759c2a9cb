"""`areal-workers reap` reports a release it could not reap, reaps the others and exits 1."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from areal_workers.cli.commands import reap
from areal_workers.cli.session import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, CliError
from areal_workers.pods.watch import none_left
from areal_workers.runtime.lease import lease_body, lease_name
from areal_workers.runtime.lease_record import OBSERVED_ANNOTATION, Observation, observation_text, record_of
from memory_backend import MemoryEvents, MemoryLeases

LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)  # on the reaper's clock: the previous look


def seen_dead(leases: MemoryLeases, release: str) -> None:
    """A Lease a previous run saw, unchanged since, long ago."""
    body = lease_body(release, "laptop/1", 30, LONG_AGO)
    body.metadata.annotations = {OBSERVED_ANNOTATION: observation_text(Observation(record_of(body), LONG_AGO))}
    leases.create_namespaced_lease("rl", body)


def test_a_failed_uninstall_is_reported_the_others_reaped_and_the_exit_code_is_1(monkeypatch, capsys):
    leases = MemoryLeases()
    seen_dead(leases, "aw-a")
    seen_dead(leases, "aw-b")
    monkeypatch.setattr(reap.client, "CoordinationV1Api", lambda api: leases)
    events = MemoryEvents()
    monkeypatch.setattr(reap.client, "EventsV1Api", lambda api: events)

    def helm(coroutine, doing):
        coroutine.close()
        if "aw-a" in doing:
            raise CliError("helm uninstall aw-a: Kubernetes cluster unreachable", EXIT_PROBLEM)

    session = SimpleNamespace(
        api=None,
        core=None,
        namespace="rl",
        foreign_chart=lambda release: None,
        untrusted=lambda release: None,
        inspector=lambda release: SimpleNamespace(topology=lambda: {}),
        kube=lambda call, doing, *args, **kwargs: call(*args, **kwargs),
        helm=helm,
        releases=SimpleNamespace(uninstall=lambda release: _coroutine()),
        pods=lambda: SimpleNamespace(wait=lambda selector, until, timeout: {} if until is none_left else None),
    )
    assert reap.reap(session, dry_run=False, timeout=10, schedule=None, fmt="json") == EXIT_PROBLEM
    captured = capsys.readouterr()
    assert "aw-a: uninstalling aw-a: helm uninstall aw-a: Kubernetes cluster unreachable" in captured.err
    assert '"action": "reaped"' in captured.out and list(leases.leases) == [lease_name("aw-a")]
    recorded = {e["reason"]: e for e in events.stored.values()}
    assert set(recorded) == {"ReapFailed", "ReleaseReaped"}
    assert recorded["ReleaseReaped"]["note"].startswith("reaped release aw-b: its trainer (laptop/1)")
    assert "Kubernetes cluster unreachable" in recorded["ReapFailed"]["note"]
    assert recorded["ReapFailed"]["type"] == "Warning" and recorded["ReleaseReaped"]["type"] == "Normal"
    assert reap.reap(session, dry_run=True, timeout=10, schedule=None, fmt="json") == EXIT_OK  # it would try aw-a again


async def _coroutine() -> None:
    return None


def test_the_schedule_gives_the_longest_gap_between_two_looks_and_a_bad_one_is_refused():
    assert reap.max_gap(None) is None
    assert reap.max_gap("*/2 * * * *") == 240.0 and reap.max_gap("@hourly") == 7200.0
    try:
        reap.max_gap("every two minutes")
    except CliError as error:
        assert error.exit_code == EXIT_USAGE and "--schedule" in str(error)
    else:
        raise AssertionError("an unreadable schedule was accepted")
