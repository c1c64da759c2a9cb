import subprocess
import sys

import yaml

from chartlib import REPO, find, one

RBAC = REPO / "rbac"
ALL_FEATURES = {
    "roles": {"a": {"replicas": 1}},
    "forks": {"p": {"target": "a", "mode": "pod"}},
    "tests": {"enabled": False},
}
# kind -> (apiGroup, resource) for what the chart renders
RESOURCES = {
    "StatefulSet": ("apps", "statefulsets"),
    "Service": ("", "services"),
    "ConfigMap": ("", "configmaps"),
    "ServiceAccount": ("", "serviceaccounts"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
    "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
}


def load(name: str) -> dict:
    return yaml.safe_load((RBAC / name).read_text())


def load_all(name: str) -> dict[str, dict]:
    """kind -> object of a file of several objects, one of each kind."""
    documents = [d for d in yaml.safe_load_all((RBAC / name).read_text()) if d]
    assert len({d["kind"] for d in documents}) == len(documents), name
    return {d["kind"]: d for d in documents}


def grants(rules: list[dict], group: str, resource: str) -> set[str]:
    verbs: set[str] = set()
    for rule in rules:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            verbs |= set(rule["verbs"])
    return verbs


def test_rbac_dir_equals_chart_rendered_rules(render):
    chart_role = one(render({"controllerRbac": {"create": True}}), "Role")
    assert load("role.yaml")["rules"] == chart_role["rules"]


def test_rbac_objects_fit_together():
    sa, role, binding = load("serviceaccount.yaml"), load("role.yaml"), load("rolebinding.yaml")
    assert (sa["kind"], role["kind"], binding["kind"]) == ("ServiceAccount", "Role", "RoleBinding")
    for doc in (sa, role, binding):
        assert "namespace" not in doc["metadata"]  # kubectl apply -n <namespace>
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"]}]
    assert (RBAC / "README.md").is_file()


def test_every_rule_says_why():
    text = (RBAC / "role.yaml").read_text()
    body = text[text.index("rules:") :].splitlines()[1:]
    for i, line in enumerate(body):
        if line.lstrip().startswith("- apiGroups"):
            assert body[i - 1].lstrip().startswith("#"), f"rule without a comment: {line}"


def test_least_privilege():
    rules = load("role.yaml")["rules"]
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field]
        assert "resourceNames" not in rule
    for resource in ("roles", "rolebindings", "clusterroles", "nodes", "namespaces"):
        assert not any(resource in r["resources"] for r in rules)
    # Only what an adapter code path uses (rbac/README.md maps each rule to it).
    assert grants(rules, "", "pods") == {"list", "watch", "delete"}
    assert grants(rules, "", "pods/log") == {"get"}
    assert grants(rules, "", "events") == {"list"}
    assert grants(rules, "events.k8s.io", "events") == {"create", "patch"}  # runtime/events.py writes, never reads
    assert grants(rules, "apps", "statefulsets/scale") == {"patch"}
    assert grants(rules, "apps", "controllerrevisions") == set()
    assert grants(rules, "", "secrets") == {"get", "list", "create", "update", "delete"}
    assert not any(
        v in grants(rules, g, r)
        for g, r in RESOURCES.values()
        for v in ("update", "deletecollection", "escalate", "bind")
    )


def test_rules_cover_every_kind_the_chart_renders_for_the_adapter(render):
    rules = load("role.yaml")["rules"]
    docs = render(ALL_FEATURES)
    kinds = {d["kind"] for d in docs}
    assert kinds == set(RESOURCES)
    for kind in kinds:
        assert {"get", "create", "patch", "delete"} <= grants(rules, *RESOURCES[kind]), kind
    assert not find(docs, "Role")


REAPER = {"reaper": {"enabled": True, "image": {"repository": "r"}}, "controllerRbac": {"create": True}}


def test_the_reaper_has_its_own_identity_and_role():
    objects = load_all("reaper.yaml")
    sa, role, binding = objects["ServiceAccount"], objects["Role"], objects["RoleBinding"]
    assert sa["metadata"]["name"] == role["metadata"]["name"] == binding["metadata"]["name"] == "areal-reaper"
    for doc in objects.values():
        assert "namespace" not in doc["metadata"]  # kubectl apply -n <namespace>
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "areal-reaper"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "areal-reaper"}]


def test_the_reaper_role_grants_what_reap_needs_and_nothing_to_create():
    """`areal-workers reap`: list, mark and delete Leases; helm uninstall (release Secrets, the release's objects,
    waited for until gone); the release's pods waited for; its own Events. Nothing else created or patched, no logs,
    events read, no Kueue."""
    rules = load_all("reaper.yaml")["Role"]["rules"]
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field]
    assert grants(rules, "coordination.k8s.io", "leases") == {"list", "update", "delete"}
    assert grants(rules, "", "secrets") == {"get", "list", "update", "delete"}
    for group, resource in RESOURCES.values():
        assert grants(rules, group, resource) == {"get", "list", "watch", "delete"}, resource
    assert grants(rules, "", "pods") == {"list", "watch"}
    assert grants(rules, "events.k8s.io", "events") == {"create", "patch"}
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {
        ("coordination.k8s.io", "leases"),
        ("", "secrets"),
        ("", "pods"),
        ("events.k8s.io", "events"),
        *RESOURCES.values(),
    }
    writes = {v for rule in rules if rule["apiGroups"] != ["events.k8s.io"] for v in rule["verbs"]}
    assert not writes & {"create", "patch", "escalate", "bind"}


def test_rbac_reaper_equals_the_chart_rendered_reaper_role(render):
    docs = [d for d in render(REAPER) if d["metadata"]["labels"].get("app.kubernetes.io/component") == "reaper"]
    chart_role = one(docs, "Role")
    assert load_all("reaper.yaml")["Role"]["rules"] == chart_role["rules"]


def test_the_roles_of_rbac_are_written_from_the_charts_rule_files():
    """rbac/role.yaml and rbac/reaper.yaml are what `make docs` writes from charts/areal-workers/files/*-rules.yaml,
    the rules the chart's Roles render: an edit to either copy alone fails here."""
    done = subprocess.run(
        [sys.executable, "-m", "docgen.rbac", "--check"], capture_output=True, text=True, cwd=REPO / "tools"
    )
    assert done.returncode == 0, done.stderr


def test_the_adapter_reads_the_grants_the_chart_renders(render):
    from areal_workers.release import ownership
    from areal_workers.release.client import chart_grants

    rendered = render(REAPER)
    roles = [d for d in rendered if d["kind"] == "Role"]
    assert len(roles) == 2
    assert chart_grants() == ownership.grants(rule for r in roles for rule in r["rules"])
