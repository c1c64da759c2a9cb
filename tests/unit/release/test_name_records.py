"""release/name_records.py: a trial's stale name_resolve records are cleared where the chart's flags point, for
the controller's user and the users the worker pods run as, and nothing else is touched."""

from __future__ import annotations

import getpass
import importlib.util
import logging
from pathlib import Path

import pytest

from areal_workers.release import name_records


@pytest.fixture(autouse=True)
def controller_user(monkeypatch):
    monkeypatch.setattr(getpass, "getuser", lambda: "ctl")


def nfs_flags(root: Path) -> list[str]:
    return ["--name-resolve-type", "nfs", "--nfs-record-root", str(root), "--fileroot", "/data"]


def statefulset(*containers: dict) -> dict:
    return {"kind": "StatefulSet", "spec": {"template": {"spec": {"containers": list(containers)}}}}


def test_flag_values_pairs_each_flag_with_the_value_after_it():
    assert name_records.flag_values(["--a", "1", "--b", 2]) == {"--a": "1", "--b": "2"}
    assert name_records.flag_values([]) == {}


def test_pod_users_are_the_user_variables_of_the_rendered_worker_containers():
    manifests = [
        statefulset(
            {"env": [{"name": "USER", "value": "areal"}, {"name": "HOME", "value": "/home/areal"}]},
            {"env": [{"name": "USER", "value": "sidecar"}]},
        ),
        statefulset({"env": [{"name": "USER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}, {}),
        {"kind": "ConfigMap", "data": {"USER": "not-a-container"}},
    ]
    assert name_records.pod_users(manifests) == {"areal", "sidecar"}


def test_an_nfs_trial_is_cleared_for_the_controller_and_the_pod_users_only(tmp_path):
    for kept_or_not in (
        "ctl/exp/t1/actor",
        "areal/exp/t1/actor",
        "areal/exp/t2/actor",
        "other/exp/t1/actor",
        "areal/exp2/t1/actor",
    ):
        (tmp_path / kept_or_not).mkdir(parents=True)
    cleared = name_records.clear_trial(nfs_flags(tmp_path), "exp", "t1", {"areal"})
    assert cleared == [str(tmp_path / "areal/exp/t1"), str(tmp_path / "ctl/exp/t1")]
    assert not (tmp_path / "areal/exp/t1").exists() and not (tmp_path / "ctl/exp/t1").exists()
    for kept in ("areal/exp/t2/actor", "other/exp/t1/actor", "areal/exp2/t1/actor"):
        assert (tmp_path / kept).is_dir(), kept


def test_a_trial_without_records_clears_nothing(tmp_path):
    assert name_records.clear_trial(nfs_flags(tmp_path), "exp", "t1", {"areal"}) == []


def test_an_nfs_root_the_controller_cannot_see_is_left_with_a_note(tmp_path, caplog):
    missing = tmp_path / "not-mounted"
    with caplog.at_level(logging.INFO, logger=name_records.__name__):
        assert name_records.clear_trial(nfs_flags(missing), "exp", "t1", set()) == []
    assert f"{missing} is not visible from the controller" in caplog.text


def test_flags_without_a_name_resolve_type_clear_nothing(tmp_path):
    (tmp_path / "ctl/exp/t1").mkdir(parents=True)
    assert name_records.clear_trial(["--fileroot", str(tmp_path)], "exp", "t1", set()) == []
    assert (tmp_path / "ctl/exp/t1").is_dir()


def test_etcd3_records_need_areal_and_etcd3_in_the_controller(monkeypatch, caplog):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: None if name == "etcd3" else find_spec(name, *args)
    )
    flags = ["--name-resolve-type", "etcd3", "--etcd3-addr", "etcd.example:2379"]
    with caplog.at_level(logging.WARNING, logger=name_records.__name__):
        assert name_records.clear_trial(flags, "exp", "t1", {"areal"}) == []
    assert "etcd3 at etcd.example:2379 are not cleared" in caplog.text


@pytest.mark.parametrize(
    ("experiment", "trial", "users", "named"),
    [
        ("..", "t", set(), "experiment '..'"),
        ("exp", "..", set(), "trial '..'"),
        ("exp", ".", set(), "trial '.'"),
        ("exp", "a/b", set(), "trial 'a/b' contains a path separator"),
        ("e\x00x", "t", set(), "a NUL byte"),
        ("exp", "t", {"../.."}, "user '../..' contains a path separator"),
        ("exp", "t", {".."}, "user '..'"),
    ],
)
def test_names_that_leave_the_record_root_are_refused_before_anything_is_removed(
    tmp_path, experiment, trial, users, named
):
    """`..` in experiment and trial together would remove <record root>/<user>, the parent of every trial."""
    root = tmp_path / "records" / "name_resolve"
    kept = [root / "ctl" / "exp" / "t", root / "ctl" / "other" / "t", tmp_path / "records" / "outside"]
    for path in kept:
        path.mkdir(parents=True)
    with pytest.raises(name_records.UnsafeRecordPath) as raised:
        name_records.clear_trial(nfs_flags(root), experiment, trial, users)
    assert named in str(raised.value) and "not cleared" in str(raised.value)
    assert all(path.is_dir() for path in kept)


def test_dot_dot_in_both_names_does_not_remove_the_users_directory(tmp_path):
    root = tmp_path / "name_resolve"
    (root / "ctl" / "exp" / "t").mkdir(parents=True)
    with pytest.raises(name_records.UnsafeRecordPath):
        name_records.clear_trial(nfs_flags(root), "..", "..", set())
    assert (root / "ctl" / "exp" / "t").is_dir()


def test_a_trial_directory_that_is_a_symlink_out_of_the_root_is_left_alone(tmp_path, caplog):
    root, elsewhere = tmp_path / "name_resolve", tmp_path / "elsewhere"
    (elsewhere / "t").mkdir(parents=True)
    (root / "ctl").mkdir(parents=True)
    (root / "ctl" / "exp").symlink_to(elsewhere)
    with caplog.at_level(logging.WARNING):
        assert name_records.clear_trial(nfs_flags(root), "exp", "t", set()) == []
    assert (elsewhere / "t").is_dir() and f"{root / 'ctl' / 'exp'} is a symbolic link" in caplog.text


def records(path: Path) -> Path:
    """A record as AReaL's nfs name_resolve writes one: a directory per key, its value in ENTRY."""
    (path / "actor" / "0").mkdir(parents=True)
    (path / "actor" / "0" / "ENTRY").write_text("10.0.0.1:8000")
    return path / "actor" / "0" / "ENTRY"


def test_an_experiment_directory_linked_to_another_experiment_is_not_followed(tmp_path, caplog):
    """`ctl/exp` links to `ctl/other` inside the root: clearing trial t of exp would clear other's trial t."""
    root = tmp_path / "name_resolve"
    entry = records(root / "ctl" / "other" / "t")
    (root / "ctl" / "exp").symlink_to(root / "ctl" / "other")
    with caplog.at_level(logging.WARNING, logger=name_records.__name__):
        assert name_records.clear_trial(nfs_flags(root), "exp", "t", set()) == []
    assert entry.read_text() == "10.0.0.1:8000"
    assert (root / "ctl" / "exp").is_symlink()  # above the trial: left as it is, reported
    assert f"{root / 'ctl' / 'exp'} is a symbolic link" in caplog.text


def test_a_user_directory_linked_to_another_user_is_not_followed(tmp_path):
    root = tmp_path / "name_resolve"
    entry = records(root / "areal" / "exp" / "t")
    (root / "ctl").symlink_to(root / "areal")
    assert name_records.clear_trial(nfs_flags(root), "exp", "t", set()) == []
    assert entry.is_file()


def test_a_trial_directory_that_is_a_link_is_removed_as_a_link(tmp_path):
    root = tmp_path / "name_resolve"
    entry = records(root / "ctl" / "exp" / "other-trial")
    (root / "ctl" / "exp" / "t").symlink_to(root / "ctl" / "exp" / "other-trial")
    assert name_records.clear_trial(nfs_flags(root), "exp", "t", set()) == [str(root / "ctl" / "exp" / "t")]
    assert not (root / "ctl" / "exp" / "t").is_symlink() and not (root / "ctl" / "exp" / "t").exists()
    assert entry.is_file()


def test_links_inside_the_trial_are_removed_never_followed(tmp_path):
    root = tmp_path / "name_resolve"
    entry = records(root / "ctl" / "exp" / "other-trial")
    own = records(root / "ctl" / "exp" / "t")
    (own.parent / "peer").symlink_to(root / "ctl" / "exp" / "other-trial")  # a directory link below the trial
    (own.parent / "ENTRY-link").symlink_to(entry)  # and a file link
    assert name_records.clear_trial(nfs_flags(root), "exp", "t", set()) == [str(root / "ctl" / "exp" / "t")]
    assert not (root / "ctl" / "exp" / "t").exists()
    assert entry.read_text() == "10.0.0.1:8000"
