"""`areal-workers history`, `rollback` and `down` (cli/commands/release.py) over a fake session and driver: which
revision a rollback returns to by default, what it refuses before anything changes, the wait for the restored
workers, and the confirmation `down` asks for."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from session_fakes import RELEASE, SessionCalls

from areal_workers import naming
from areal_workers.cli.commands import release
from areal_workers.cli.session import EXIT_ABORTED, EXIT_NOT_FOUND, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE, CliError
from areal_workers.errors import LeaseLostError
from areal_workers.orchestration.decision_events import DecisionEvents
from areal_workers.pods.inspector import RevisionRecords
from areal_workers.pods.watch import WaitTimedOut
from areal_workers.release.model import ReleaseModel
from areal_workers.runtime.events import EventRecorder
from areal_workers.runtime.lease import ReleaseLease, lease_body, lease_name
from memory_backend import MemoryEvents, MemoryLeases

SELECTOR = {naming.LABEL_NAME: naming.CHART_NAME, naming.LABEL_INSTANCE: RELEASE}


def model(revision: int | None = 3, **topology: Any) -> ReleaseModel:
    return ReleaseModel(
        values={"roles": {"actor": {"replicas": 2}}},
        topology={
            "selector": SELECTOR,
            "experiment": "exp",
            "trial": "t",
            "roles": {"actor": {"replicas": 2}, "critic": {"replicas": 1}},
            **topology,
        },
        revision=revision,
    )


def entry(revision: int, status: str = "superseded", description: str = "") -> SimpleNamespace:
    return SimpleNamespace(
        revision=revision,
        updated=datetime(2026, 1, 2, 3, revision, 5, tzinfo=UTC),
        status=SimpleNamespace(value=status),
        description=description,
    )


def ready_pod(name: str, index: int) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={naming.LABEL_POD_INDEX: str(index)}),
        status=client.V1PodStatus(
            pod_ip=f"127.30.0.{index + 1}", conditions=[client.V1PodCondition(type="Ready", status="True")]
        ),
    )


class FakePods:
    """PodWatch.wait: the pods of each selector (all Ready), or a time-out for `slow` selectors."""

    def __init__(self, slow: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.slow = slow
        self.waited: list[str] = []

    def wait(self, selector: str, done: Any, timeout: float) -> dict[str, client.V1Pod]:
        self.waited.append(selector)
        replicas = {"actor": 2, "critic": 1, "judge": 2}[selector.rsplit("=", 1)[1]]
        pods = {f"pod-{i}": ready_pod(f"pod-{i}", i) for i in range(replicas)}
        if selector in self.slow or not done(pods):
            raise WaitTimedOut({})
        return pods


class FakeDriver:
    """The ReleaseDriver calls the commands make, recorded in `steps`."""

    def __init__(self, current: ReleaseModel, good_revision: int | None = None, pods: FakePods | None = None) -> None:
        self.name = RELEASE
        self.model = current
        self.good_revision = good_revision
        self.pods = pods or FakePods()
        self.inspector = SimpleNamespace(timeout_diagnosis=lambda workload, replicas, pods: f"{workload}: Pending")
        self.steps: list[tuple[Any, ...]] = []
        self.recorded = MemoryEvents()
        self.events = DecisionEvents(EventRecorder(self.recorded, "rl", RELEASE, instance="laptop"), RELEASE)

    def restore(self, target: int) -> list[str]:
        self.steps.append(("restore", target))
        self.model = ReleaseModel(self.model.values, self.model.topology, (self.model.revision or 0) + 1)
        return ["aw-exp-t-1a2b3c4d-actor-1"]

    def mark_good(self) -> None:
        self.steps.append(("mark_good",))

    def scale_down_to_rank_zero(self, role: str) -> None:
        self.steps.append(("scale_down_to_rank_zero", role))

    def uninstall(self, why: str = "") -> None:
        self.steps.append(("uninstall",))


class FakeSession(SessionCalls):
    """What the commands use of cli.session.Session; `foreign` holds the revisions of another chart (None: the
    release itself)."""

    namespace = "rl"

    def __init__(
        self,
        history: list[SimpleNamespace],
        driver: FakeDriver | None = None,
        ready_revision: int | None = None,
        foreign: set[int | None] = frozenset(),  # type: ignore[assignment]
        pods: list[client.V1Pod] | None = None,
        images: dict[int, dict[str, list[str]]] | None = None,
        values: dict[int, dict[str, Any]] | None = None,
        notes: dict[int, str] | None = None,
    ) -> None:
        self.entries = history
        self.images = images or {}
        self.made_driver = driver or FakeDriver(model())
        self.ready = ready_revision
        self.foreign = foreign
        self.listed = pods or []
        self.refused: list[tuple[Any, ...]] = []
        self.drivers_built = 0
        self.revision_values = values or {}
        self.notes = notes or {}
        self.releases = SimpleNamespace(history=self._history, values=self._values)

    async def _history(self, name: str) -> list[SimpleNamespace]:
        return self.entries

    async def _values(self, name: str, revision: int) -> dict[str, Any] | None:
        return self.revision_values.get(revision, self.made_driver.model.values)

    def inspector(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(
            ready_revision=lambda: self.ready,
            revision_records=lambda: RevisionRecords(self.ready, self.images, self.notes),
        )

    def model(self, name: str) -> ReleaseModel:
        return self.made_driver.model

    def refuse_external(self, name: str, current: ReleaseModel, doing: str) -> None:
        self.refused.append(("external", doing))
        if current.revision is None:
            raise CliError(f"cannot {doing} {name}: it was applied without helm", EXIT_USAGE)

    def refuse_foreign(self, name: str, doing: str, revision: int | None = None) -> None:
        self.refused.append(("foreign", doing, revision))
        if revision in self.foreign:
            raise CliError(f"cannot {doing} {name}: revision {revision} is another chart's", EXIT_USAGE)

    def driver(self, name: str) -> FakeDriver:
        self.drivers_built += 1
        return self.made_driver

    def pods(self) -> SimpleNamespace:
        return SimpleNamespace(list=lambda selector: (self.listed, "1"))


HISTORY = [entry(1), entry(2, description="Upgrade complete"), entry(3, status="deployed")]


# --- history ----------------------------------------------------------------------------------------------


def test_history_lists_each_revision_and_marks_the_last_all_ready_one(capsys):
    assert release.history(FakeSession(HISTORY, ready_revision=2), "json") == EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    assert printed["release"] == RELEASE and printed["ready_revision"] == 2
    assert [(r["revision"], r["status"], r["all_ready"]) for r in printed["revisions"]] == [
        (1, "superseded", False),
        (2, "superseded", True),
        (3, "deployed", False),
    ]
    assert printed["revisions"][0]["updated"] == "2026-01-02T03:01:05+00:00"
    assert printed["revisions"][1]["description"] == "Upgrade complete"


def test_the_history_table_shows_the_time_to_the_second_and_yes_for_the_all_ready_revision(capsys):
    assert release.history(FakeSession(HISTORY, ready_revision=2), "table") == EXIT_OK
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["REVISION", "UPDATED", "STATUS", "LAST", "ALL-READY", "IMAGES", "RAN", "DESCRIPTION"]
    assert rows[2] == ["2", "2026-01-02", "03:02:05", "superseded", "yes", "Upgrade", "complete"]
    assert rows[3] == ["3", "2026-01-02", "03:03:05", "deployed"]


def test_the_history_shows_the_digests_each_recorded_revision_ran(capsys):
    ran = {
        1: {"actor": ["r.local/areal-worker@sha256:" + "a" * 64]},
        2: {"actor": ["r.local/areal-worker@sha256:" + "b" * 64]},
    }
    assert release.history(FakeSession(HISTORY, ready_revision=2, images=ran), "json") == EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    assert [r["images"] for r in printed["revisions"]] == [ran[1], ran[2], {}]
    assert release.history(FakeSession(HISTORY, ready_revision=2, images=ran), "table") == EXIT_OK
    table = capsys.readouterr().out
    assert "actor=areal-worker@sha256:aaaaaaaaaaaa" in table and "actor=areal-worker@sha256:bbbbbbbbbbbb" in table


def test_the_history_says_which_revision_failed_and_what_rolled_it_back(capsys):
    history = [*HISTORY, entry(4, status="deployed", description="Rollback to 2")]
    history[2] = entry(3, description="update actor: image a:1->a:2")
    notes = {3: "workers failed: OOMKilled (actor/0)", 4: "after revision 3 failed: OOMKilled (actor/0)"}
    assert release.history(FakeSession(history, ready_revision=4, notes=notes), "json") == EXIT_OK
    printed = json.loads(capsys.readouterr().out)["revisions"]
    assert [r["note"] for r in printed] == ["", "", notes[3], notes[4]]
    assert release.history(FakeSession(history, ready_revision=4, notes=notes), "table") == EXIT_OK
    rows = [line.split(None, 4) for line in capsys.readouterr().out.splitlines()]
    assert rows[3][:4] == ["3", "2026-01-02", "03:03:05", "failed"]
    assert rows[3][4].endswith("update actor: image a:1->a:2 (workers failed: OOMKilled (actor/0))")
    assert rows[4][3] == "deployed" and "Rollback to 2 (after revision 3 failed: OOMKilled (actor/0))" in rows[4][4]


def test_a_release_without_history_is_not_found_unless_it_was_applied_without_helm():
    session = FakeSession([])
    with pytest.raises(CliError) as raised:
        release.history(session, "json")
    assert raised.value.exit_code == EXIT_NOT_FOUND
    assert str(raised.value) == f"release {RELEASE} not found in namespace rl"
    external = FakeSession([], driver=FakeDriver(model(revision=None)))
    with pytest.raises(CliError, match="applied without helm") as raised:
        release.history(external, "json")
    assert raised.value.exit_code == EXIT_USAGE


# --- the default rollback target --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "good", "revisions", "target"),
    [
        (5, 3, [1, 2, 3, 4, 5], 3),  # the last all-ready revision, while the current one is not it
        (5, 5, [1, 2, 3, 4, 5], 4),  # the current one is all-ready: the one before, as helm's default
        (5, None, [1, 2, 3, 4, 5], 4),
        (5, 1, [3, 4, 5], 4),  # helm no longer keeps the all-ready one
        (5, 3, [1, 3, 5, 6], 3),
        (6, None, [2, 4, 6], 4),  # the previous revision helm keeps, not current - 1
    ],
)
def test_the_default_target_is_the_last_all_ready_revision_or_the_one_before(current, good, revisions, target):
    assert release.default_target(RELEASE, current, good, revisions)[0] == target


def test_the_default_target_says_why_it_is_not_the_last_all_ready_one():
    assert release.default_target(RELEASE, 5, 3, [3, 4, 5]) == (3, "the last all-ready revision")
    assert release.default_target(RELEASE, 5, None, [3, 4, 5])[1] == (
        "the previous revision: no all-ready revision is recorded to go back to"
    )


def test_a_release_with_no_earlier_revision_has_no_default_target():
    with pytest.raises(CliError, match="has no revision before 1 to roll back to") as raised:
        release.default_target(RELEASE, 1, None, [1])
    assert raised.value.exit_code == EXIT_USAGE


# --- rollback ---------------------------------------------------------------------------------------------


def test_rollback_restores_the_default_target_after_checking_it_is_this_charts(capsys):
    driver = FakeDriver(model(3), good_revision=1)
    session = FakeSession(HISTORY, driver=driver, ready_revision=1)
    assert release.rollback(session, None, wait=False, timeout=60, force=False, fmt="json") == EXIT_OK
    assert driver.steps == [("restore", 1)]  # no wait: not marked all-ready
    (event,) = driver.recorded.stored.values()  # about the release: the Lease, as no topology ConfigMap is read
    assert event["reason"] == "RolledBack" and event["note"].endswith("from revision 3 to 1 (revision 4) by hand")
    assert session.refused == [("foreign", "roll back", None), ("foreign", "roll back", 1)]
    assert json.loads(capsys.readouterr().out) == {
        "release": RELEASE,
        "from_revision": 3,
        "to_revision": 1,
        "new_revision": 4,
        "replaced_pods": ["aw-exp-t-1a2b3c4d-actor-1"],
        "ready": None,
    }


def test_a_revision_helm_does_not_keep_is_refused_before_anything_changes():
    session = FakeSession(HISTORY)
    with pytest.raises(CliError) as raised:
        release.rollback(session, 7, wait=False, timeout=60, force=False, fmt="json")
    assert raised.value.exit_code == EXIT_NOT_FOUND
    assert str(raised.value).startswith(f"release {RELEASE} keeps revisions 1, 2, 3; no revision 7")
    assert session.drivers_built == 0 and session.made_driver.steps == []


def test_a_named_revision_of_another_chart_is_refused_before_the_driver_adopts_the_release():
    session = FakeSession(HISTORY, foreign={2})
    with pytest.raises(CliError, match="revision 2 is another chart's"):
        release.rollback(session, 2, wait=False, timeout=60, force=False, fmt="json")
    assert session.drivers_built == 0 and session.made_driver.steps == []


def test_a_default_target_of_another_chart_is_refused_before_it_is_restored():
    driver = FakeDriver(model(3))
    session = FakeSession(HISTORY, driver=driver, foreign={2})
    with pytest.raises(CliError, match="revision 2 is another chart's"):
        release.rollback(session, None, wait=False, timeout=60, force=False, fmt="json")
    assert driver.steps == []


def test_a_release_of_another_chart_is_not_rolled_back():
    session = FakeSession(HISTORY, foreign={None})
    with pytest.raises(CliError, match="another chart's"):
        release.rollback(session, 2, wait=False, timeout=60, force=False, fmt="json")
    assert session.refused == [("foreign", "roll back", None)]


def test_with_wait_the_restored_roles_and_pod_forks_are_waited_for_and_the_revision_marked_good(capsys):
    forks = {"gen": {"target": "actor", "mode": "process"}, "judge": {"target": "actor", "mode": "pod"}}
    pods = FakePods()
    driver = FakeDriver(model(3, forks=forks), pods=pods)
    assert (
        release.rollback(FakeSession(HISTORY, driver=driver), 2, wait=True, timeout=60, force=False, fmt="table")
        == EXIT_OK
    )
    # Roles, then pod-mode forks, each sorted; a process fork has no pods of its own.
    assert pods.waited == [naming.role_selector(RELEASE, w) for w in ("actor", "critic", "judge")]
    assert driver.steps == [("restore", 2), ("mark_good",)]
    assert (
        capsys.readouterr().out.replace("\n", " ").split()
        == (
            f"rolled back {RELEASE} to revision 2 (now revision 4); replaced pods stuck on the abandoned revision: "
            "aw-exp-t-1a2b3c4d-actor-1; every worker is ready"
        ).split()
    )


def test_a_restored_role_not_ready_in_time_is_a_timeout_with_its_diagnosis():
    pods = FakePods(slow={naming.role_selector(RELEASE, "critic")})
    driver = FakeDriver(model(3), pods=pods)
    with pytest.raises(CliError) as raised:
        release.rollback(FakeSession(HISTORY, driver=driver), 2, wait=True, timeout=60, force=False, fmt="json")
    assert raised.value.exit_code == EXIT_TIMEOUT
    assert str(raised.value) == "rolled back to revision 4, but critic was not ready within 60s:\ncritic: Pending"
    assert ("mark_good",) not in driver.steps


# --- what a rollback changes: --dry-run, the plan shown first, the question on a terminal -------------------

SCALED_UP = {
    1: {"roles": {"actor": {"replicas": 1, "image": {"repository": "example.com/areal", "tag": "1"}}}},
}


def test_a_dry_run_shows_the_target_why_and_each_roles_change_and_changes_nothing(capsys):
    session = FakeSession(HISTORY, values={2: {"roles": {"actor": {"replicas": 1}, "critic": {"replicas": 1}}}})
    assert release.rollback(session, None, wait=True, timeout=60, force=False, fmt="json", dry_run=True) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == {
        "release": RELEASE,
        "from_revision": 3,
        "to_revision": 2,
        "why": "the previous revision: no all-ready revision is recorded to go back to",
        "changes": ["actor: replicas 2->1", "critic: added, 1 worker(s), image (release default)"],
    }
    assert session.drivers_built == 0 and session.made_driver.steps == [] and session.trainer_leases is None


def test_without_a_terminal_the_rollback_goes_on_and_says_first_what_it_changes(monkeypatch, capsys):
    monkeypatch.setattr(release.sys, "stdin", SimpleNamespace(isatty=lambda: False))
    session = FakeSession(HISTORY, values=SCALED_UP)
    assert release.rollback(session, 1, wait=False, timeout=60, force=False, fmt="json") == EXIT_OK
    assert session.made_driver.steps == [("restore", 1)]
    err = capsys.readouterr().err
    assert f"roll back {RELEASE} from revision 3 to revision 1 (as asked):" in err
    assert "  actor: replicas 2->1, image (release default)->example.com/areal:1" in err


@pytest.mark.parametrize(("answer", "restored"), [("", False), ("n", False), ("y", True)])
def test_on_a_terminal_a_rollback_asks_after_showing_what_it_changes(answer, restored, monkeypatch, capsys):
    monkeypatch.setattr(release.sys, "stdin", SimpleNamespace(isatty=lambda: True))
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or answer)
    session = FakeSession(HISTORY, values=SCALED_UP)
    code = release.rollback(session, 1, wait=False, timeout=60, force=False, fmt="json")
    assert asked == ["Roll back? [y/N] "]
    assert (code, session.made_driver.steps) == ((EXIT_OK, [("restore", 1)]) if restored else (EXIT_ABORTED, []))
    if not restored:
        assert "nothing rolled back" in capsys.readouterr().err
    assert release.rollback(session, 1, wait=False, timeout=60, force=False, fmt="json", yes=True) == EXIT_OK
    assert len(asked) == 1  # --yes: not asked


# --- down -------------------------------------------------------------------------------------------------


def pods_of_release() -> list[client.V1Pod]:
    return [ready_pod(f"{RELEASE}-critic-0", 0), ready_pod(f"{RELEASE}-actor-0", 0)]


def test_down_without_a_terminal_needs_yes(monkeypatch):
    monkeypatch.setattr(release.sys, "stdin", SimpleNamespace(isatty=lambda: False))
    session = FakeSession(HISTORY, pods=pods_of_release())
    with pytest.raises(CliError) as raised:
        release.down(session, yes=False, rank_zero_last=False, force=False, fmt="json")
    assert raised.value.exit_code == EXIT_USAGE
    assert str(raised.value) == (
        f"would delete release {RELEASE} (experiment exp, trial t) in namespace rl: 2 worker pod(s), roles actor, "
        "critic; pass --yes to confirm without a terminal"
    )
    assert session.made_driver.steps == []


@pytest.mark.parametrize(("answer", "deleted"), [("", False), ("n", False), ("yes please", False), (" Y ", True)])
def test_down_on_a_terminal_deletes_only_when_the_answer_is_yes(answer, deleted, monkeypatch, capsys):
    monkeypatch.setattr(release.sys, "stdin", SimpleNamespace(isatty=lambda: True))
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or answer)
    session = FakeSession(HISTORY, pods=pods_of_release())
    code = release.down(session, yes=False, rank_zero_last=False, force=False, fmt="json")
    assert asked and asked[0].startswith(f"Delete release {RELEASE} ") and asked[0].endswith("? [y/N] ")
    assert (code, session.made_driver.steps) == ((EXIT_OK, [("uninstall",)]) if deleted else (EXIT_ABORTED, []))
    if not deleted:
        assert "nothing deleted" in capsys.readouterr().err


def test_down_with_rank_zero_last_scales_each_role_down_to_rank_zero_first(capsys):
    session = FakeSession(HISTORY, pods=pods_of_release())
    assert release.down(session, yes=True, rank_zero_last=True, force=False, fmt="json") == EXIT_OK
    assert session.made_driver.steps == [
        ("scale_down_to_rank_zero", "actor"),
        ("scale_down_to_rank_zero", "critic"),
        ("uninstall",),
    ]
    assert json.loads(capsys.readouterr().out) == {
        "release": RELEASE,
        "namespace": "rl",
        "deleted_pods": [f"{RELEASE}-actor-0", f"{RELEASE}-critic-0"],
    }
    assert session.refused == [("external", "delete"), ("foreign", "delete", None)]


def test_down_refuses_a_release_applied_without_helm_and_one_of_another_chart():
    external = FakeSession(HISTORY, driver=FakeDriver(model(revision=None)))
    with pytest.raises(CliError, match="applied without helm"):
        release.down(external, yes=True, rank_zero_last=False, force=False, fmt="json")
    foreign = FakeSession(HISTORY, foreign={None})
    with pytest.raises(CliError, match="another chart's"):
        release.down(foreign, yes=True, rank_zero_last=False, force=False, fmt="json")
    assert external.made_driver.steps == [] and foreign.made_driver.steps == []


def test_a_release_without_selector_labels_lists_no_pods():
    bare = ReleaseModel(values={}, topology={"roles": {"actor": {"replicas": 1}}}, revision=2)
    session = FakeSession(HISTORY, driver=FakeDriver(bare), pods=pods_of_release())
    session.pods = lambda: pytest.fail("no selector: nothing to list")  # type: ignore[method-assign]
    assert release.down(session, yes=True, rank_zero_last=False, force=False, fmt="table") == EXIT_OK
    assert session.made_driver.steps == [("uninstall",)]


# --- a trainer's Lease --------------------------------------------------------------------------------------

LEASE_GRACE = 2  # seconds: a command watches a holder for two renewal intervals (1 s here) before taking it


def trainers_lease(session: FakeSession, live: bool) -> MemoryLeases:
    leases = session.leases()
    leases.create_namespaced_lease("rl", lease_body(RELEASE, "trainer-pod/1/abc", LEASE_GRACE, datetime.now(UTC)))
    if live:
        leases.live.add(lease_name(RELEASE))
    return leases


@pytest.mark.parametrize("command", ["down", "rollback"])
def test_a_live_trainers_release_is_left_alone_without_force(command):
    """The trainer would undo the change at its next one (it applies its own values): refused, nothing changed."""
    session = FakeSession(HISTORY, driver=FakeDriver(model(3), good_revision=1), pods=pods_of_release())
    leases = trainers_lease(session, live=True)
    with pytest.raises(CliError, match="its trainer is alive") as raised:
        if command == "down":
            release.down(session, yes=True, rank_zero_last=False, force=False, fmt="json")
        else:
            release.rollback(session, None, wait=False, timeout=60, force=False, fmt="json")
    assert raised.value.exit_code == EXIT_USAGE and "--force" in str(raised.value)
    assert session.made_driver.steps == []
    assert leases.leases[lease_name(RELEASE)].spec.holder_identity == "trainer-pod/1/abc"


def test_force_takes_a_live_trainers_lease_so_the_trainer_stops_writing():
    session = FakeSession(HISTORY, pods=pods_of_release())
    leases = trainers_lease(session, live=True)
    trainer = ReleaseLease(leases, "rl", RELEASE, LEASE_GRACE)  # type: ignore[arg-type]
    trainer.holder, trainer._held = "trainer-pod/1/abc", True
    assert release.down(session, yes=True, rank_zero_last=False, force=True, fmt="json") == EXIT_OK
    assert session.made_driver.steps == [("uninstall",)] and leases.leases == {}  # the release a person's: removed
    trainer.renew()
    with pytest.raises(LeaseLostError):
        trainer.require_held()


def test_a_dead_trainers_lease_is_taken_after_watching_it_and_deleted_after_the_rollback():
    session = FakeSession(HISTORY, driver=FakeDriver(model(3), good_revision=1), ready_revision=1)
    leases = trainers_lease(session, live=False)
    assert release.rollback(session, None, wait=False, timeout=60, force=False, fmt="json") == EXIT_OK
    assert session.made_driver.steps == [("restore", 1)]
    assert leases.leases == {}  # no reaper removes the rolled-back release: it is a person's now
