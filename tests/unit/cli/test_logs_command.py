"""`areal-workers logs` (cli/commands/logs.py) over the fake session of test_workers_command: a role alone is its
rank 0 (as `kubectl logs` takes a workload's first pod), an unknown name is refused with the trial's roles, --since
is kubectl's, and Ctrl-C ends -f with exit 130 and the stream released."""

from __future__ import annotations

from typing import Any

import pytest
from test_workers_command import RELEASE, FakeSession, LogResponse, LogText, pod

from areal_workers.cli import log_stream
from areal_workers.cli.commands import logs
from areal_workers.cli.main import build_parser
from areal_workers.cli.session import EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_OK, CliError


def test_a_role_alone_is_its_rank_zero_with_a_note_naming_the_worker(capsys):
    session = FakeSession([pod("actor", 0), pod("actor", 1)])
    session.log = LogText("actor 0 says hello\n")
    assert logs.logs(session, "actor", follow=False, tail=None, previous=False) == EXIT_OK
    out, err = capsys.readouterr()
    assert session.log_request[0] == f"{RELEASE}-actor-0" and out == "actor 0 says hello\n"
    assert err.strip() == "actor has 2 workers; showing actor/0 (logs actor/INDEX for another)"


def test_a_role_of_one_worker_and_a_process_fork_need_no_note(capsys):
    session = FakeSession([pod("actor", 0), pod("critic", 0)])
    session.log = LogText("x\n")
    assert logs.worker_pod(session, RELEASE, "critic") == f"{RELEASE}-critic-0"
    assert capsys.readouterr().err == ""
    assert logs.worker_pod(session, RELEASE, "gen") == f"{RELEASE}-actor-0"  # gen's target is actor


def test_a_name_that_is_no_role_nor_a_pod_of_the_release_names_the_roles():
    session = FakeSession([pod("actor", 0)])
    with pytest.raises(CliError) as raised:
        logs.worker_pod(session, RELEASE, "rollout")
    assert raised.value.exit_code == EXIT_NOT_FOUND
    assert str(raised.value) == (
        f"no role or worker pod 'rollout' in trial {RELEASE} (roles: actor, critic, gen); name a role, a worker "
        f"ROLE/INDEX or a pod {RELEASE}-ROLE-INDEX"
    )


@pytest.mark.parametrize(("since", "seconds"), [("10m", 600), ("1h30m", 5400), ("500ms", 1)])
def test_since_is_a_duration_as_kubectl_takes_it_in_whole_seconds(since, seconds):
    args = build_parser().parse_args(["logs", "actor/0", "--since", since])
    session = FakeSession([pod("actor", 0)])
    session.log = LogText("recent\n")
    assert logs.logs(session, "actor/0", follow=False, tail=None, previous=False, since=args.since) == EXIT_OK
    assert session.log_request[1]["since_seconds"] == seconds


def test_a_bad_since_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(["logs", "actor/0", "--since", "ten minutes"])
    assert raised.value.code == 2 and "--since" in capsys.readouterr().err


def test_ctrl_c_ends_a_follow_with_exit_130_and_the_stream_released(monkeypatch):
    session = FakeSession([pod("actor", 0)])
    session.log = LogResponse([b"step 1\n"])

    def interrupted(reader: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(log_stream, "wait_for", interrupted)
    assert logs.logs(session, "actor/0", follow=True, tail=None, previous=False) == EXIT_INTERRUPTED
    assert session.log.released
