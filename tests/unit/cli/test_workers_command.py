"""`areal-workers status`, `diagnose` and `logs` (cli/commands/workers.py, logs.py) over a fake session: the
trainer's Lease in words, a role or worker id resolved against the trial's model, the pod of a worker (a process
fork's is its target's), a release re-read when a workload it did not know shows up, and the exit codes of a log
read the API refuses."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from session_fakes import RELEASE, SessionCalls

from areal_workers import naming
from areal_workers.cli import session as session_module
from areal_workers.cli.commands import logs, workers
from areal_workers.cli.session import EXIT_CLUSTER, EXIT_NOT_FOUND, EXIT_OK, EXIT_PROBLEM, CliError
from areal_workers.pods import ready_pods
from areal_workers.release.model import ReleaseModel
from areal_workers.runtime.lease import lease_body
from areal_workers.runtime.lease_record import (
    OBSERVED_ANNOTATION,
    REAPING_ANNOTATION,
    Observation,
    observation_text,
    record_of,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # the reaper's clock
ENTRY = {"replicas": 2, "guard_port": 8000, "extra_ports": []}
TOPOLOGY: dict[str, Any] = {
    "experiment": "exp",
    "trial": "t",
    "roles": {"actor": ENTRY, "critic": {**ENTRY, "replicas": 1, "statefulset": f"{RELEASE}-critic"}},
    "forks": {"gen": {"target": "actor", "mode": "process", "replicas": 2, "ports": []}},
}


# --- the trainer's Lease ----------------------------------------------------------------------------------


def lease(seen_since: datetime | None = None, reaping: bool = False, grace: int = 30) -> client.V1Lease:
    body = lease_body(RELEASE, "laptop/1", grace, NOW - timedelta(hours=3))  # the trainer's clock is never read
    notes = {}
    if seen_since is not None:
        notes[OBSERVED_ANNOTATION] = observation_text(Observation(record_of(body), seen_since))
    if reaping:
        notes[REAPING_ANNOTATION] = NOW.isoformat()
    body.metadata.annotations = notes or None
    return body


def test_a_lease_of_no_release_says_nothing():
    other = lease()
    other.metadata.labels = {"app": "else"}
    assert workers.trainer_text(other, NOW) == ""


def test_a_lease_the_reaper_has_not_seen_unchanged_is_renewing():
    assert (
        workers.trainer_text(lease(), NOW) == "trainer laptop/1 renewing (lease renewed since the reaper's last look)"
    )


def test_a_lease_seen_unchanged_within_its_grace_is_quiet_for_how_long_the_reaper_saw_it():
    text = workers.trainer_text(lease(seen_since=NOW - timedelta(seconds=12)), NOW)
    assert text == "trainer laptop/1 quiet: lease unchanged for 12s of its 30s grace"


def test_a_lease_seen_unchanged_past_its_grace_is_silent_and_named_for_reaping():
    text = workers.trainer_text(lease(seen_since=NOW - timedelta(seconds=45)), NOW)
    assert text == (
        "trainer laptop/1 silent: lease unchanged for 45s, past its 30s grace (areal-workers reap removes the release)"
    )


def test_a_lease_being_reaped_is_a_dead_trainer_whatever_its_silence():
    assert workers.trainer_text(lease(seen_since=NOW, reaping=True), NOW) == (
        "trainer laptop/1 dead: a reaper is uninstalling the release"
    )


# --- a fake session ---------------------------------------------------------------------------------------


def pod(role: str, index: int, ready: bool = True, terminating: bool = False, release: str = RELEASE) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=f"{release}-{role}-{index}" + ("-old" if terminating else ""),
            namespace="rl",
            uid=f"uid-{role}-{index}-{terminating}",
            labels={naming.LABEL_INSTANCE: release, naming.LABEL_ROLE: role, naming.LABEL_POD_INDEX: str(index)},
            deletion_timestamp=NOW if terminating else None,
        ),
        spec=client.V1PodSpec(containers=[client.V1Container(name="worker", image="example.com/areal:1")]),
        status=client.V1PodStatus(
            phase="Running",
            pod_ip=f"127.30.0.{index + 1}",
            conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
            container_statuses=[
                client.V1ContainerStatus(
                    name="worker",
                    image="example.com/areal:1",
                    image_id="",
                    ready=ready,
                    restart_count=0,
                    state=client.V1ContainerState(running=client.V1ContainerStateRunning(started_at=NOW)),
                )
            ],
        ),
    )


class FakeSession(SessionCalls):
    """What the commands use of cli.session.Session, over `topology` (None: no helm record of the release)."""

    namespace = "rl"
    api = None

    def __init__(self, pods: list[client.V1Pod], topology: dict[str, Any] | None = None, helm: bool = True) -> None:
        self.topology = copy.deepcopy(topology or TOPOLOGY)
        self.listed = pods
        self.helm_record = helm
        self.revision, self.helm_status, self.description, self.ready = 3, "deployed", "Upgrade complete", 2
        self.held_record: ready_pods.Record = {}  # the topology ConfigMap's record of the pods AReaL holds
        self.reads = 0
        self.selectors: list[str] = []
        self.releases = SimpleNamespace(current=self._current)
        self.log: Any = None
        self.events: list[client.CoreV1Event] = []
        self.core = SimpleNamespace(read_namespaced_pod_log=self._log, list_namespaced_event=self._events)
        self.selection = SimpleNamespace(named=lambda: RELEASE)

    def cluster_error(self, error: Any, doing: str) -> CliError:
        return session_module.cluster_error(error, doing, self.namespace)

    async def _current(self, release: str) -> Any:
        self.reads += 1
        if not self.helm_record:
            return None

        async def values() -> dict[str, Any]:
            return {}

        return SimpleNamespace(
            revision=self.revision,
            status=SimpleNamespace(value=self.helm_status),
            description=self.description,
            values=values,
        )

    def _log(self, pod_name: str, namespace: str, **kwargs: Any) -> Any:
        if isinstance(self.log, BaseException):
            raise self.log
        self.log_request = (pod_name, kwargs)
        return self.log

    def _events(self, namespace: str, field_selector: str = "", label_selector: str = "") -> SimpleNamespace:
        """A StatefulSet's events by field (diagnose), or the release's decisions by label (status): none here."""
        if label_selector:
            return SimpleNamespace(items=[])
        self.event_selector = field_selector
        return SimpleNamespace(items=self.events)

    def inspector(self, release: str) -> SimpleNamespace:
        return SimpleNamespace(
            topology=lambda: self.topology,
            ready_revision=lambda: self.ready,
            ready_pods=lambda: self.held_record,
            nodes=lambda: [],
            events=lambda pod: [],
            log_tail=lambda pod: [],
            disruption_budgets=lambda selector: [],
        )

    def external_model(self, release: str, topology: dict[str, Any]) -> ReleaseModel:
        return ReleaseModel(topology=topology)

    def pods(self) -> SimpleNamespace:
        def listing(selector: str) -> tuple[list[client.V1Pod], str]:
            self.selectors.append(selector)
            wanted = dict(term.split("=", 1) for term in selector.split(","))
            matching = [p for p in self.listed if all(p.metadata.labels.get(k) == v for k, v in wanted.items())]
            return matching, "1"

        return SimpleNamespace(list=listing)


# --- reading the trial ------------------------------------------------------------------------------------


def test_a_release_helm_knows_is_read_with_its_revision_status_and_ready_revision():
    model, status, ready = workers.TrialReader(FakeSession([]), [RELEASE]).read(RELEASE)
    assert (model.revision, status, ready) == (3, "deployed", 2)
    assert model.workloads() == {"actor", "critic", "gen"}


def test_a_release_applied_without_helm_is_its_topology_alone():
    model, status, ready = workers.TrialReader(FakeSession([], helm=False), [RELEASE]).read(RELEASE)
    assert (model.revision, status, ready) == (None, workers.EXTERNAL_STATUS, None)
    assert model.roles == TOPOLOGY["roles"]


def test_the_model_is_read_once_and_again_when_a_pod_of_an_unknown_workload_shows_up(monkeypatch):
    monkeypatch.setattr(workers.TrialReader, "trainer", lambda self, release: "")
    session = FakeSession([])
    reader = workers.TrialReader(session, [RELEASE])
    first = reader.statuses([pod("actor", 0), pod("actor", 1), pod("critic", 0)])
    reader.statuses([pod("actor", 0)])
    assert session.reads == 1 and [w.id for w in first[0].workers] == [
        "actor/0",
        "actor/1",
        "critic/0",
        "gen/0",
        "gen/1",
    ]
    # A later revision added a role (a new topology: the model read before keeps its own).
    session.topology = {**TOPOLOGY, "roles": {**TOPOLOGY["roles"], "ref": {**ENTRY, "replicas": 1}}}
    again = reader.statuses([pod("actor", 0), pod("ref", 0), pod("actor", 0, release="aw-other")])
    assert session.reads == 2
    assert "ref/0" in [w.id for w in again[0].workers]
    assert [w.ready for w in again[0].workers if w.role == "actor"] == [True, False]  # aw-other's pod is not its


def test_an_unreadable_lease_leaves_the_trainer_unsaid(monkeypatch):
    def refused(api: Any) -> SimpleNamespace:
        def read(name: str, namespace: str) -> Any:
            raise ApiException(status=403, reason="Forbidden")

        return SimpleNamespace(read_namespaced_lease=read)

    monkeypatch.setattr(workers.client, "CoordinationV1Api", refused)
    assert workers.TrialReader(FakeSession([]), []).trainer(RELEASE) == ""


# --- resolving a target -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "resolved"),
    [("actor", ("actor", None)), ("actor/1", ("actor", [1])), ("gen/0", ("gen", [0])), ("critic/0", ("critic", [0]))],
)
def test_a_role_means_every_worker_and_role_index_one(target, resolved):
    assert workers.resolve_target(ReleaseModel(topology=TOPOLOGY, revision=3), target) == resolved


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("ref", "no role 'ref' in this trial (roles: actor, critic, gen)"),
        ("ref/0", "no role 'ref' in this trial (roles: actor, critic, gen)"),
        ("actor/2", "actor has 2 workers (0..1); no actor/2"),
        ("gen/5", "gen has 2 workers (0..1); no gen/5"),
    ],
)
def test_a_target_the_trial_does_not_have_is_not_found_with_what_it_has(target, message):
    with pytest.raises(CliError) as raised:
        workers.resolve_target(ReleaseModel(topology=TOPOLOGY, revision=3), target)
    assert (str(raised.value), raised.value.exit_code) == (message, EXIT_NOT_FOUND)


def test_a_trial_without_workloads_says_none():
    with pytest.raises(CliError, match=r"\(roles: none\)"):
        workers.resolve_target(ReleaseModel(topology={}), "actor")


# --- the pod of a worker ----------------------------------------------------------------------------------


def test_a_pod_name_is_taken_as_given_without_reading_the_release():
    session = FakeSession([])
    assert logs.worker_pod(session, RELEASE, f"{RELEASE}-actor-0") == f"{RELEASE}-actor-0"
    assert session.reads == 0


def test_a_workers_pod_is_the_live_one_of_its_index_and_a_process_forks_is_its_targets():
    session = FakeSession([pod("actor", 1, terminating=True), pod("actor", 0), pod("actor", 1)])
    assert logs.worker_pod(session, RELEASE, "actor/1") == f"{RELEASE}-actor-1"
    assert logs.worker_pod(session, RELEASE, "gen/1") == f"{RELEASE}-actor-1"
    assert session.selectors == [naming.role_selector(RELEASE, "actor")] * 2


def test_a_worker_whose_pod_is_only_terminating_has_no_pod():
    session = FakeSession([pod("critic", 0, terminating=True)])
    with pytest.raises(CliError) as raised:
        logs.worker_pod(session, RELEASE, "critic/0")
    assert raised.value.exit_code == EXIT_NOT_FOUND
    assert str(raised.value) == "worker critic/0 has no pod right now (areal-workers diagnose critic/0)"


# --- diagnose ---------------------------------------------------------------------------------------------


def test_diagnose_reports_a_missing_pod_with_its_statefulsets_events_and_exits_with_a_problem(capsys):
    session = FakeSession([])
    session.events = [
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"e{i}"),
            involved_object=client.V1ObjectReference(kind="StatefulSet", name=f"{RELEASE}-critic"),
            type="Warning",
            reason="FailedCreate",
            message=f"quota {i}",
        )
        for i in range(7)
    ]
    assert workers.diagnose(session, "critic", "json") == EXIT_PROBLEM
    found = json.loads(capsys.readouterr().out)
    assert found["healthy"] is False and found["target"] == "critic"
    (finding,) = found["workers"]
    assert finding["worker"] == "critic/0" and finding["pod"] is None
    assert finding["problem"]["reason"] == "NoPod"
    # The last five events, of the role's own StatefulSet.
    assert finding["problem"]["events"] == [f"Warning FailedCreate: quota {i}" for i in range(2, 7)]
    assert session.event_selector == f"involvedObject.kind=StatefulSet,involvedObject.name={RELEASE}-critic"


def test_diagnose_of_ready_workers_is_healthy(capsys):
    session = FakeSession([pod("actor", 0), pod("actor", 1)])
    assert workers.diagnose(session, "actor", "table") == EXIT_OK
    assert capsys.readouterr().out.splitlines() == [
        f"actor/0 ({RELEASE}-actor-0): ready, no problem found",
        f"actor/1 ({RELEASE}-actor-1): ready, no problem found",
    ]


def test_diagnose_of_one_worker_looks_at_that_worker_only(capsys):
    session = FakeSession([pod("actor", 0), pod("actor", 1, ready=False)])
    assert workers.diagnose(session, "actor/0", "json") == EXIT_OK
    assert [f["worker"] for f in json.loads(capsys.readouterr().out)["workers"]] == ["actor/0"]


# --- logs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "exit_code", "message"),
    [
        (404, EXIT_NOT_FOUND, f"pod {RELEASE}-actor-0 not found in namespace rl"),
        (400, EXIT_PROBLEM, f"no log for {RELEASE}-actor-0: previous terminated container not found"),
        (500, EXIT_CLUSTER, f"reading the log of {RELEASE}-actor-0: the apiserver answered 500 Internal Server Error"),
    ],
)
def test_a_log_the_api_refuses_is_an_error_by_its_status(status, exit_code, message):
    session = FakeSession([])
    error = ApiException(status=status, reason="Internal Server Error" if status == 500 else "Bad Request")
    error.body = "previous terminated container not found" if status == 400 else None
    session.log = error
    with pytest.raises(CliError) as raised:
        logs.logs(session, f"{RELEASE}-actor-0", follow=False, tail=None, previous=True)
    assert (str(raised.value), raised.value.exit_code) == (message, exit_code)


class LogResponse:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.released = False
        self.connection = None

    def stream(self, size: int) -> Any:
        yield from self.chunks

    def release_conn(self) -> None:
        self.released = True


def test_a_workers_log_is_read_from_its_pod_copied_to_stdout_and_released(capsys):
    session = FakeSession([pod("actor", 0), pod("actor", 1)])
    session.log = LogResponse([b"step 1\n", b"step 2\n"])
    assert logs.logs(session, "gen/1", follow=True, tail=20, previous=False) == EXIT_OK
    assert session.log_request == (
        f"{RELEASE}-actor-1",
        {"follow": True, "tail_lines": 20, "previous": False, "_preload_content": False},
    )
    assert capsys.readouterr().out == "step 1\nstep 2\n" and session.log.released


class LogText:
    def __init__(self, text: str) -> None:
        self.data = text.encode()


def crashed(worker: client.V1Pod, restarts: int) -> client.V1Pod:
    [status] = worker.status.container_statuses
    status.restart_count = restarts
    status.last_state = client.V1ContainerState(
        terminated=client.V1ContainerStateTerminated(exit_code=3, reason="Error")
    )
    return worker


class RestartingSession(FakeSession):
    """A pod whose current container has written nothing yet and whose previous one wrote `previous_log`."""

    def __init__(self, worker: client.V1Pod, previous_log: str) -> None:
        super().__init__([worker])
        self.worker = worker
        self.requests: list[dict[str, Any]] = []
        self.core = SimpleNamespace(read_namespaced_pod_log=self._by_instance, read_namespaced_pod=self._pod)
        self.previous_log = previous_log

    def _by_instance(self, pod_name: str, namespace: str, **kwargs: Any) -> LogText:
        self.requests.append(kwargs)
        return LogText(self.previous_log if kwargs["previous"] else "")

    def _pod(self, name: str, namespace: str) -> client.V1Pod:
        return self.worker


def test_a_log_is_read_whole_and_never_parsed_by_the_client(capsys):
    session = FakeSession([pod("actor", 0)])
    session.log = LogText('{"step": 1}\n')
    assert logs.logs(session, "actor/0", follow=False, tail=5, previous=False) == EXIT_OK
    assert session.log_request[1] == {"_preload_content": False, "tail_lines": 5, "previous": False}
    assert capsys.readouterr().out == '{"step": 1}\n'


def test_an_empty_log_of_a_restarted_container_is_followed_by_the_previous_ones_with_a_note(capsys):
    session = RestartingSession(crashed(pod("actor", 0, ready=False), restarts=2), "cannot load /ckpt\n")
    assert logs.logs(session, "actor/0", follow=False, tail=5, previous=False) == EXIT_OK
    out, err = capsys.readouterr()
    assert out == "cannot load /ckpt\n"
    assert err.strip() == (
        f"{RELEASE}-actor-0: the current container (restart 2) has not logged yet; "
        "the previous one's log (exit code 3) follows"
    )
    assert [r["previous"] for r in session.requests] == [False, True]


def test_an_empty_log_of_a_container_that_never_restarted_stays_empty(capsys):
    session = RestartingSession(pod("actor", 0), "never read\n")
    assert logs.logs(session, "actor/0", follow=False, tail=None, previous=False) == EXIT_OK
    assert capsys.readouterr() == ("", "")
    assert [r["previous"] for r in session.requests] == [False]
