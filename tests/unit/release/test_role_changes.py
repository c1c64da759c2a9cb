"""What two revisions' values differ in, for people: the description of an update (history) and what a rollback
would do (rollback --dry-run), so neither shows raw values a person must compare by eye."""

from __future__ import annotations

from areal_workers.release.model import image_text, role_changes, roles_diff

ACTOR = {
    "replicas": 1,
    "image": {"repository": "example.com/areal", "tag": "1"},
    "resources": {"cpu": "1", "memory": "1Gi", "gpu": 0},
    "env": {"OMP_NUM_THREADS": "1", "TOKEN": "secret-1"},
    "command": ["python", "-m", "areal.infra.rpc.rpc_server"],
}


def test_replicas_image_resources_env_names_and_other_keys_are_each_named():
    after = {
        **ACTOR,
        "replicas": 2,
        "image": {"repository": "example.com/areal", "tag": "2"},
        "resources": {"cpu": "1", "memory": "2Gi", "gpu": 0},
        "env": {"OMP_NUM_THREADS": "1", "TOKEN": "secret-2"},
        "command": ["python", "-c", "exit(3)"],
    }
    assert role_changes(ACTOR, after) == [
        "replicas 1->2",
        "image example.com/areal:1->example.com/areal:2",
        "memory 1Gi->2Gi",
        "env TOKEN changed",
        "command changed",
    ]
    assert "secret" not in " ".join(role_changes(ACTOR, after))  # env values may be secrets
    assert role_changes(ACTOR, dict(ACTOR)) == []


def test_an_entry_without_an_image_runs_the_releases_and_a_digest_is_written_with_at():
    without = {key: value for key, value in ACTOR.items() if key != "image"}
    assert role_changes(without, ACTOR, "example.com/areal:0") == ["image example.com/areal:0->example.com/areal:1"]
    assert image_text({"repository": "r", "tag": "sha256:" + "0" * 64}) == "r@sha256:" + "0" * 64
    assert image_text(None) == "(release default)"


def test_a_rollback_diff_names_each_role_added_removed_or_changed():
    current = {"roles": {"actor": {**ACTOR, "replicas": 2}, "broken": ACTOR}, "forks": {"ref": {"target": "actor"}}}
    target = {"roles": {"actor": ACTOR, "critic": ACTOR}}
    assert roles_diff(current, target) == [
        "actor: replicas 2->1",
        "broken: removed (1 worker(s))",
        "critic: added, 1 worker(s), image example.com/areal:1",
        "ref: fork removed",
    ]
    assert roles_diff(target, target) == []
