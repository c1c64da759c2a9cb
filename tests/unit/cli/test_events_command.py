"""`areal-workers events` and status's last decisions (cli/commands/events.py, cli/decisions_view.py) over a fake
session: only what areal-workers wrote is a decision, oldest first by its last occurrence, a series shows its count,
--since and --limit cut the list, JSON carries every field, and a watch shows a known Event again only when its
series counted one more."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from session_fakes import RELEASE

from areal_workers.cli import decisions_view
from areal_workers.cli.commands import events, workers
from areal_workers.cli.decisions_view import decision_of, decisions_in, decisions_selector, latest
from areal_workers.cli.session import EXIT_OK, Selection

NOW = datetime.now(UTC)


def event(
    name: str,
    reason: str,
    seconds_ago: float,
    note: str = "",
    count: int | None = None,
    reporter: str = "areal-workers",
    kind: str = "StatefulSet",
) -> client.CoreV1Event:
    moment = NOW - timedelta(seconds=seconds_ago)
    series = client.CoreV1EventSeries(count=count, last_observed_time=moment) if count else None
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(
            name=name, labels={"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/managed-by": "areal-workers"}
        ),
        involved_object=client.V1ObjectReference(kind=kind, name=f"{RELEASE}-actor"),
        reason=reason,
        message=note,
        type="Warning" if reason == "RolledBack" else "Normal",
        action="Rollback" if reason == "RolledBack" else "Update",
        reporting_component=reporter,
        event_time=moment if not count else moment - timedelta(minutes=5),
        series=series,
    )


def test_the_selector_is_the_labels_every_recorded_event_carries():
    assert decisions_selector(RELEASE) == (
        f"app.kubernetes.io/managed-by=areal-workers,app.kubernetes.io/instance={RELEASE}"
    )
    assert decisions_selector(None) == "app.kubernetes.io/managed-by=areal-workers"


def test_only_what_areal_workers_reported_is_a_decision_oldest_first_by_last_occurrence():
    listed = [
        event("b", "RolledBack", 10, "rolled back to revision 1"),
        event("a", "RevisionWritten", 60, "revision 2"),
        event("forged", "RolledBack", 5, reporter="someone-else"),  # the labels alone do not make it ours
        event("c", "ChangeRefused", 1, "no node can hold it", count=3),  # first seen 5 minutes ago, last 1 s ago
    ]
    made = decisions_in(listed)
    assert [d.name for d in made] == ["a", "b", "c"]
    assert made[2].count == 3 and made[0].count == 1
    assert made[1].regarding == f"statefulset/{RELEASE}-actor" and made[1].release == RELEASE
    line = made[2].line(NOW)
    assert line.strip().startswith("1s") and line.endswith("no node can hold it (x3)")
    assert "RolledBack" in made[1].line(NOW) and "Warning" in made[1].line(NOW)
    assert latest(made, 2) == made[1:] and latest(made, 0) == []


def test_an_event_from_the_future_is_shown_as_just_now():
    ahead = decision_of(event("a", "RevisionWritten", -30))  # the API server's clock ahead of this machine's
    assert ahead is not None and ahead.line(NOW).strip().startswith("0s")


class FakeCore:
    def __init__(self, items: list[client.CoreV1Event]) -> None:
        self.items, self.selectors = items, []

    def list_namespaced_event(self, namespace: str, label_selector: str) -> SimpleNamespace:
        self.selectors.append(label_selector)
        return SimpleNamespace(items=self.items, metadata=SimpleNamespace(resource_version="7"))


def session(items: list[client.CoreV1Event], release: str | None = RELEASE) -> SimpleNamespace:
    return SimpleNamespace(
        core=FakeCore(items),
        namespace="rl",
        selection=Selection(release=release),
        kube=lambda call, doing, *args, **kwargs: call(*args, **kwargs),
    )


LISTED = [
    event("a", "RevisionWritten", 3600, "release r revision 1: create actor"),
    event("b", "WorkerFailed", 120, "worker actor/0 failed: exit code 4"),
    event("c", "RolledBack", 100, "rolled back release r to revision 1"),
]


def test_json_lists_every_field_of_the_trials_decisions(capsys):
    fake = session(LISTED)
    assert events.events(fake, "json", None, None, False, None) == EXIT_OK
    listed = json.loads(capsys.readouterr().out)
    assert fake.core.selectors == [decisions_selector(RELEASE)]
    assert listed["release"] == RELEASE and listed["namespace"] == "rl"
    assert [d["reason"] for d in listed["decisions"]] == ["RevisionWritten", "WorkerFailed", "RolledBack"]
    assert set(listed["decisions"][2]) == {"release", "time", "type", "reason", "action", "regarding", "note", "count"}


def test_since_and_limit_cut_the_list(capsys):
    events.events(session(LISTED), "table", 600.0, None, False, None)
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == events.HEADER and [line.split()[2] for line in shown[1:]] == ["WorkerFailed", "RolledBack"]
    events.events(session(LISTED), "table", None, 1, False, None)
    assert [line.split()[2] for line in capsys.readouterr().out.splitlines()[1:]] == ["RolledBack"]


def test_no_decision_says_so_and_that_events_expire(capsys):
    assert events.events(session([], release=None), "table", None, None, False, None) == EXIT_OK
    assert capsys.readouterr().out.strip() == (
        "no decisions recorded for any trial in namespace rl (the API server keeps Events for its --event-ttl, "
        "one hour by default)"
    )


def test_a_watch_shows_a_known_event_again_only_when_its_series_counted_one_more():
    seen = {"a": 1, "c": 2}
    first = decisions_in([event("a", "RevisionWritten", 5), event("c", "ChangeRefused", 1, count=2)])
    assert events._unseen(first, seen) == []
    again = decisions_in([event("c", "ChangeRefused", 0, count=3), event("d", "RolledBack", 0)])
    assert [(d.name, d.count) for d in events._unseen(again, seen)] == [("c", 3), ("d", 1)]
    assert seen == {"a": 1, "c": 3, "d": 1}


@pytest.mark.parametrize("limit", ["0", "-2", "x"])
def test_a_limit_below_one_is_a_usage_error(limit):
    from areal_workers.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["events", "--limit", limit])
    assert exited.value.code == 2


def test_status_shows_the_last_decisions_under_its_tables(capsys):
    from areal_workers.cli.output import console, trial_renderable
    from areal_workers.cli.status_view import TrialStatus

    status = TrialStatus(RELEASE, "exp", "t", 2, "deployed", 1, decisions=decisions_in(LISTED))
    console().print(trial_renderable(status))
    out = capsys.readouterr().out
    assert "last decisions (areal-workers events for all):" in out and "rolled back release r to revision 1" in out
    assert status.to_dict()["decisions"][1]["reason"] == "WorkerFailed"
    refused = TrialStatus(RELEASE, "exp", "t", 2, "deployed", 1, decisions_note="decisions not shown: forbidden")
    console().print(trial_renderable(refused))
    assert "decisions not shown: forbidden" in capsys.readouterr().out


def test_status_reads_the_last_five_decisions_and_goes_on_when_events_are_refused():
    fake = session([event(str(i), "RevisionWritten", 100 - i) for i in range(8)])
    reader = workers.TrialReader(fake, [])
    shown, note = reader.decisions(RELEASE)
    assert [d.name for d in shown] == ["3", "4", "5", "6", "7"] and note == ""
    assert len(shown) == decisions_view.STATUS_DECISIONS

    def refuse(namespace: str, label_selector: str) -> None:
        raise ApiException(status=403, reason="Forbidden")

    fake.core.list_namespaced_event = refuse
    assert reader.decisions(RELEASE) == ([], "decisions not shown: listing Events was refused (Forbidden)")
