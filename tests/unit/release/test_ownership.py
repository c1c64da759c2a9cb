"""release/ownership.py: a helm release of another chart is never this adapter's to change, nor a revision helm
recorded that holds what the chart never renders (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from areal_workers import naming
from areal_workers.release import ownership
from areal_workers.release.ownership import foreign_chart_problem, foreign_object_problem, grants, split_manifest

CHART_YAML = Path(naming.__file__).parent / "chart" / "Chart.yaml"


def test_the_chart_name_is_the_one_chart_yaml_gives():
    assert yaml.safe_load(CHART_YAML.read_text())["name"] == naming.CHART_NAME


def test_a_release_of_this_chart_or_no_release_at_all_is_no_problem():
    assert foreign_chart_problem("aw-x", "rl", naming.CHART_NAME) is None
    assert foreign_chart_problem("aw-x", "rl", None) is None


def test_a_release_of_another_chart_is_named_with_its_namespace_and_chart():
    problem = foreign_chart_problem("db", "rl", "postgresql")
    assert problem == (
        "release db in namespace rl is a release of chart 'postgresql', not 'areal-workers': areal-workers changes "
        "only releases of its own chart"
    )


def test_a_revision_of_another_chart_is_named_as_the_revision():
    problem = foreign_chart_problem("db", "rl", "postgresql", revision=1)
    assert problem is not None and problem.startswith("revision 1 of release db in namespace rl is a release of chart")
    assert foreign_chart_problem("db", "rl", naming.CHART_NAME, revision=1) is None


# --- a revision helm recorded holds only what the chart renders ----------------------------------------------

CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: aw-x-topology\n  namespace: rl\ndata:\n  a: b\n"
CLUSTER_ROLE_BINDING = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: takeover
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: areal-controller, namespace: rl}]
"""
ROLE = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: aw-x-controller, namespace: rl}
rules:
  - apiGroups: ["apps"]
    resources: ["statefulsets"]
    verbs: ["get", "create"]
"""
BINDING = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: aw-x-controller, namespace: rl}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: aw-x-controller}
subjects: [{kind: ServiceAccount, name: aw-x-controller, namespace: rl}]
"""
GRANTS = {("apps", "statefulsets", "get"), ("apps", "statefulsets", "create"), ("", "secrets", "get")}


def problem_of(manifest: str, hooks: list[tuple[str, str]] | None = None) -> str | None:
    return foreign_object_problem("aw-x", "rl", 3, manifest, hooks or [], GRANTS)


def documents(*texts: str) -> str:
    return "".join(f"---\n# Source: areal-workers/templates/x.yaml\n{text}" for text in texts)


def test_the_chart_kinds_in_the_release_namespace_are_no_problem():
    assert problem_of(documents(CONFIGMAP, ROLE, BINDING)) is None
    assert problem_of("") is None
    assert problem_of(documents(CONFIGMAP.replace("  namespace: rl\n", ""))) is None  # helm puts it in rl


def test_a_cluster_role_binding_in_the_manifest_is_named_with_the_revision_and_what_to_do():
    problem = problem_of(documents(CONFIGMAP, CLUSTER_ROLE_BINDING))
    assert problem is not None
    assert problem.startswith(
        "revision 3 of release aw-x in namespace rl holds ClusterRoleBinding takeover without a namespace in its "
        "manifest, "
        "which chart areal-workers never renders"
    )
    assert "Nothing was changed" in problem
    assert (
        "`helm get manifest aw-x --revision 3 -n rl`" in problem
        and "`helm get hooks aw-x --revision 3 -n rl`" in problem
    )
    assert "Secret sh.helm.release.v1.aw-x.v3" in problem


def test_a_hook_is_checked_as_the_manifest_is():
    problem = problem_of(documents(CONFIGMAP), [("aw-x-test-health", documents(CLUSTER_ROLE_BINDING))])
    assert (
        problem is not None
        and "ClusterRoleBinding takeover without a namespace in its hook aw-x-test-health" in problem
    )


@pytest.mark.parametrize(
    ("document", "named"),
    [
        (
            CONFIGMAP.replace("namespace: rl", "namespace: kube-system"),
            "ConfigMap aw-x-topology in namespace kube-system",
        ),
        (
            "apiVersion: evil.example/v1\nkind: ConfigMap\nmetadata: {name: c}\n",
            "ConfigMap c of apiVersion evil.example/v1 without a namespace in its manifest",
        ),
        ("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", "Secret s without a namespace"),
        ("apiVersion: v1\nkind: List\nitems: []\n", "List ?"),
        (
            ROLE.replace('verbs: ["get", "create"]', 'verbs: ["*"]'),
            "granting what the chart's Roles do not (* statefulsets.apps)",
        ),
        (
            ROLE.replace('resources: ["statefulsets"]', 'resources: ["pods/exec"]'),
            "(create pods/exec.apps, get pods/exec.apps)",
        ),
        (
            ROLE.replace("rules:\n", "rules:\n  - nonResourceURLs: ['/metrics']\n    verbs: [get]\n"),
            "rules not written",
        ),
        (
            BINDING.replace("kind: Role,", "kind: ClusterRole,").replace(
                "name: aw-x-controller}\nsubjects", "name: admin}\nsubjects"
            ),
            "binding ClusterRole admin, not a Role",
        ),
        (BINDING.replace("kind: ServiceAccount", "kind: User"), "a subject that is not a ServiceAccount"),
        (
            BINDING.replace("namespace: rl}]", "namespace: kube-system}]"),
            "ServiceAccount aw-x-controller of namespace kube-system",
        ),
        ("- just\n- a list\n", "a document that is not an object"),
    ],
)
def test_what_the_chart_never_renders_is_refused(document, named):
    problem = problem_of(documents(CONFIGMAP, ROLE, document))
    assert problem is not None and named in problem, problem


def test_a_binding_of_a_role_the_revision_does_not_hold_is_refused():
    problem = problem_of(documents(BINDING))
    assert problem is not None and "binding Role aw-x-controller, which the same revision does not hold" in problem


@pytest.mark.parametrize(
    ("text", "why"),
    [
        # Parsers disagree on duplicate keys: one may apply the first kind, another check the last.
        ("apiVersion: v1\nkind: ClusterRoleBinding\nkind: ConfigMap\nmetadata: {name: c}\n", "duplicate key 'kind'"),
        ("base: &b {kind: ClusterRole}\nkind: ConfigMap\napiVersion: v1\n", "an anchor or alias"),
        ("apiVersion: v1\n<<: {kind: ClusterRole}\nkind: ConfigMap\n", "a merge key (<<)"),
        ("apiVersion: v1\nkind: !custom ConfigMap\n", "could not determine a constructor"),
    ],
)
@pytest.mark.parametrize("loader", ["libyaml", "pure-python"])
def test_yaml_the_chart_never_writes_is_refused(text, why, loader, monkeypatch):
    if loader == "pure-python":  # PyYAML built without libyaml
        monkeypatch.setattr(ownership, "STRICT_LOADER", ownership._StrictLoader)
    else:
        assert ownership.STRICT_LOADER is not ownership._StrictLoader  # the wheels this suite installs have libyaml
    problem = problem_of(documents(text))
    assert problem is not None and "YAML that cannot be read as the chart renders it" in problem and why in problem


def test_every_document_helm_splits_off_is_checked():
    """Helm splits a manifest at every `---` that starts a line, even with text after it; YAML would read
    `---kind` as part of the previous document's scalar."""
    hidden = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata:\n  a: |\n    x\n---{CLUSTER_ROLE_BINDING}"
    assert len(split_manifest(hidden)) == 2
    problem = problem_of(hidden)
    assert problem is not None and "ClusterRoleBinding takeover" in problem


def test_grants_are_the_product_of_each_rules_groups_resources_and_verbs():
    rules = [{"apiGroups": ["", "apps"], "resources": ["a"], "verbs": ["get", "list"]}, {"apiGroups": ["x"]}]
    assert grants(rules) == {("", "a", "get"), ("", "a", "list"), ("apps", "a", "get"), ("apps", "a", "list")}
