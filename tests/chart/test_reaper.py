"""The reaper CronJob (reaper.enabled) as a release of its own: what such a release renders, the reaper pod's
security level, its ServiceAccount, and the schema of its values. (The CronJob's fields: the helm-unittest suite
charts/areal-workers/tests/reaper_test.yaml.)"""

from chartlib import find, one, role
from test_security import restricted_violations

REAPER = {"reaper": {"enabled": True, "image": {"repository": "registry.example.com/areal-workers", "tag": "v0.1.0"}}}


def pod_spec(cronjob: dict) -> dict:
    return cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_a_reaper_only_release_renders_the_cronjob_and_no_trial_object(render):
    """No topology ConfigMap (the CLI finds trials by it), no workers' ServiceAccount, NetworkPolicy or test Pod."""
    docs = render(REAPER)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("CronJob", "rel-areal-workers-reaper")]


def test_a_reaper_only_release_with_controller_rbac_runs_the_reaper_as_its_own_identity(render):
    """The controller's objects for the trainers, and the reaper's own, bound to the reaper's narrower Role."""
    docs = render({**REAPER, "controllerRbac": {"create": True}})
    assert sorted(d["kind"] for d in docs) == [
        "CronJob",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "ServiceAccount",
        "ServiceAccount",
    ]
    reaper = [d for d in docs if d["metadata"]["labels"]["app.kubernetes.io/component"] == "reaper"]
    account = next(d for d in reaper if d["kind"] == "ServiceAccount")["metadata"]["name"]
    assert account == "rel-areal-workers-reaper"
    assert pod_spec(one(docs, "CronJob"))["serviceAccountName"] == account
    binding = next(d for d in reaper if d["kind"] == "RoleBinding")
    role = next(d for d in reaper if d["kind"] == "Role")
    assert binding["subjects"][0]["name"] == account and binding["roleRef"]["name"] == role["metadata"]["name"]
    # It writes nothing but its own Events (what it reaped): no create or patch on any other kind.
    writes = [rule for rule in role["rules"] if {"create", "patch"} & set(rule["verbs"])]
    assert writes == [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}], writes


def test_a_release_with_roles_and_the_reaper_is_a_trial(render):
    docs = render({**REAPER, "roles": {"actor": role()}})
    assert {d["kind"] for d in docs} == {
        "CronJob",
        "StatefulSet",
        "Service",
        "ConfigMap",
        "ServiceAccount",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Pod",
    }


def test_an_empty_release_without_the_reaper_keeps_its_trial_objects(render):
    """An adapter-driven release whose last role was deleted keeps its topology ConfigMap (the ready revision)."""
    assert {d["kind"] for d in render({})} == {"ConfigMap", "ServiceAccount", "NetworkPolicy", "Pod"}


def test_the_reaper_pod_passes_restricted_and_calls_the_api(render):
    spec = pod_spec(one(render(REAPER), "CronJob"))
    assert restricted_violations(spec) == []
    assert spec["automountServiceAccountToken"] is True and spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "areal-reaper"  # rbac/reaper.yaml


def test_the_reaper_carries_no_owner_even_when_the_release_has_owners(render):
    owners = [{"apiVersion": "batch/v1", "kind": "Job", "name": "t", "uid": "5c1e7a2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d"}]
    docs = render({**REAPER, "roles": {"actor": role()}, "ownerReferences": owners})
    assert "ownerReferences" not in one(docs, "CronJob")["metadata"]
    assert find(docs, "StatefulSet")[0]["metadata"]["ownerReferences"] == owners


def test_an_image_is_required(render_error):
    err = render_error({"reaper": {"enabled": True}})
    assert (
        "reaper.enabled is true but reaper.image.repository is empty: set it to an image with areal-workers and helm"
    ) in err, err


def test_a_hung_reaper_run_is_stopped_so_the_next_ones_can_run(render):
    """concurrencyPolicy Forbid skips every run while one is active: a run hung on the API must have a deadline."""
    cronjob = one(render(REAPER), "CronJob")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 1800
    shorter = {"reaper": {**REAPER["reaper"], "activeDeadlineSeconds": 600}}
    assert one(render(shorter), "CronJob")["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 600


def test_the_reaper_knows_its_own_schedule(render):
    """`reap` reads it to tell a gap in its looks (the reaper stopped, the apiserver away) from a trainer's silence."""
    scheduled = {"reaper": {**REAPER["reaper"], "schedule": "*/5 * * * *"}}
    [container] = pod_spec(one(render(scheduled), "CronJob"))["containers"]
    assert {"name": "AREAL_WORKERS_REAPER_SCHEDULE", "value": "*/5 * * * *"} in container["env"]
