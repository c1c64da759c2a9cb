"""The controller and reaper identities the chart renders are the ones rbac/cluster/admission-policy.yaml acts on.

The policies pick the controller's and the reaper's requests by user name (a ValidatingAdmissionPolicy sees no labels
of the requesting ServiceAccount), so a ServiceAccount of `controllerRbac.create` named otherwise escapes them and can
mint a token of any ServiceAccount of its namespace. Every name below is checked against the pattern read from the
policy file itself, so the test fails when the chart's names and the policy drift apart; the chart's own copy of the
pattern (the preflight's, "areal-workers.policyIdentityPattern") is compared with it too.
(On the API server: tests/integration/test_admission_policy.py.)"""

from __future__ import annotations

import re

import pytest
import yaml

from chartlib import CHART, NAMESPACE, REPO, find, render, render_error

POLICY_FILE = REPO / "rbac" / "cluster" / "admission-policy.yaml"
HELPERS = CHART / "templates" / "_identity.tpl"
REAPER = {"enabled": True, "image": {"repository": "registry.example.com/areal-workers", "tag": "v0.1.0"}}
IDENTITY_COMPONENTS = ("controller", "reaper")
LONG = "a-very-long-release-name-for-the-training-platform-x"  # 52 characters, Helm's limit is 53
assert len(LONG) == 52


def policy_pattern() -> str:
    """The user-name pattern of the policies' matchConditions, one for all of them."""
    patterns = set()
    for document in yaml.safe_load_all(POLICY_FILE.read_text()):
        if document and document["kind"] == "ValidatingAdmissionPolicy":
            [condition] = document["spec"]["matchConditions"]
            found = re.fullmatch(r"request\.userInfo\.username\.matches\('(.+)'\)", condition["expression"].strip())
            assert found, condition
            patterns.add(found.group(1))
    [pattern] = patterns
    return pattern


def chart_pattern() -> str:
    found = re.search(r'{{- define "areal-workers\.policyIdentityPattern" -}}\n(.+)\n{{- end -}}', HELPERS.read_text())
    assert found, "areal-workers.policyIdentityPattern is missing from _identity.tpl"
    return found.group(1)


def matched(namespace: str, name: str) -> bool:
    return re.fullmatch(policy_pattern(), f"system:serviceaccount:{namespace}:{name}") is not None


def identities(docs: list[dict]) -> dict[str, set[str]]:
    """component -> the names of every controller and reaper identity a render holds: its ServiceAccounts and the
    subjects of its RoleBindings, and the ServiceAccount its reaper pods run as."""
    found: dict[str, set[str]] = {component: set() for component in IDENTITY_COMPONENTS}
    for doc in docs:
        component = doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        if component not in IDENTITY_COMPONENTS:
            continue
        if doc["kind"] == "ServiceAccount":
            found[component].add(doc["metadata"]["name"])
        elif doc["kind"] == "RoleBinding":
            found[component] |= {s["name"] for s in doc["subjects"] if s["kind"] == "ServiceAccount"}
        elif doc["kind"] == "CronJob":
            found[component].add(doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"])
    return found


def test_the_chart_checks_names_with_the_policys_own_pattern():
    prefix = "^system:serviceaccount:[^:]+:"
    pattern = policy_pattern()
    assert pattern.startswith(prefix), pattern
    assert chart_pattern() == "^" + pattern[len(prefix) :], (chart_pattern(), pattern)


# (release, values, the controller's ServiceAccount expected, the reaper's) for releases that render both; None: only
# checked against the policy.
MATRIX = [
    pytest.param("demo", {}, "demo-areal-workers-controller", "demo-areal-workers-reaper", id="short"),
    pytest.param("reaper", {}, "reaper-areal-workers-controller", "reaper-areal-workers-reaper", id="reaper"),
    pytest.param("areal-workers", {}, "areal-workers-controller", "areal-workers-reaper", id="the-chart-name"),
    pytest.param(
        "areal-workers-infra",
        {},
        "areal-workers-infra-areal-workers-controller",
        "areal-workers-infra-areal-workers-reaper",
        id="contains-the-chart-name",
    ),
    pytest.param("my-areal-workers", {}, "my-areal-workers-controller", "my-areal-workers-reaper", id="ends-in-it"),
    pytest.param(LONG, {}, None, None, id="52-characters"),
    pytest.param(LONG + "y", {}, None, None, id="53-characters"),
    pytest.param("areal-workers-" + "z" * 39, {}, None, None, id="53-characters-with-the-chart-name"),
    pytest.param(
        "demo",
        {"fullnameOverride": "rl"},
        "rl-areal-workers-controller",
        "rl-areal-workers-reaper",
        id="fullnameOverride",
    ),
    pytest.param("demo", {"fullnameOverride": "x" * 63}, None, None, id="fullnameOverride-63-characters"),
    pytest.param(
        "demo",
        {"nameOverride": "rl"},
        "demo-rl-areal-workers-controller",
        "demo-rl-areal-workers-reaper",
        id="nameOverride",
    ),
    pytest.param(
        "demo",
        {"controllerRbac": {"serviceAccountName": "trainer-areal-workers-controller"}},
        "trainer-areal-workers-controller",
        "demo-areal-workers-reaper",
        id="explicit-controller",
    ),
    pytest.param(
        "demo",
        {"controllerRbac": {"serviceAccountName": "areal-controller"}},
        "areal-controller",
        "demo-areal-workers-reaper",
        id="explicit-rbac-name",
    ),
    pytest.param(
        "demo",
        {"reaper": {"serviceAccountName": "areal-reaper"}},
        "demo-areal-workers-controller",
        None,
        id="explicit-reaper",
    ),
]


@pytest.mark.parametrize("release, values, controller, reaper", MATRIX)
def test_every_controller_and_reaper_identity_the_chart_renders_is_matched_by_the_policy(
    release, values, controller, reaper
):
    values = {**values, "roles": {"actor": {"replicas": 1}}}
    values["controllerRbac"] = {"create": True, **values.get("controllerRbac", {})}
    values["reaper"] = {**REAPER, **values.get("reaper", {})}
    docs = render(values, release=release)
    found = identities(docs)
    assert found["controller"] and found["reaper"], found
    escaping = [name for names in found.values() for name in names if not matched(NAMESPACE, name)]
    assert not escaping, escaping
    for names in found.values():
        assert all(len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) for name in names), names
    assert len(found["controller"]) == 1, found
    if controller:
        assert found["controller"] == {controller}
    if reaper:
        assert reaper in found["reaper"]
    # The reaper CronJob keeps its own name (at most 52 characters: its Jobs' names become pod labels).
    [cronjob] = find(docs, "CronJob")
    assert len(cronjob["metadata"]["name"]) <= 52


def test_long_names_keep_the_suffix_and_stay_distinct():
    """Two releases whose names differ only after the cut get ServiceAccounts of different names (a hash of the
    whole name), so one release's install does not collide with the other's."""
    names = []
    for release in (LONG + "a", LONG + "b"):
        docs = render({"controllerRbac": {"create": True}, "reaper": REAPER}, release=release)
        found = identities(docs)
        [controller] = found["controller"]
        assert controller.endswith("-areal-workers-controller") and len(controller) <= 63, controller
        assert all(name.endswith("-areal-workers-reaper") and len(name) <= 63 for name in found["reaper"]), found
        names.append(controller)
    assert names[0] != names[1]


@pytest.mark.parametrize(
    "values, key, suggestion",
    [
        (
            {"controllerRbac": {"create": True, "serviceAccountName": "trainer"}},
            "controllerRbac.serviceAccountName",
            "trainer-areal-workers-controller",
        ),
        (
            {"controllerRbac": {"create": True, "serviceAccountName": "areal-workers-controller-x"}},
            "controllerRbac.serviceAccountName",
            "areal-workers-controller-x-areal-workers-controller",
        ),
        (
            {"reaper": {**REAPER, "serviceAccountName": "cluster-reaper"}},
            "reaper.serviceAccountName",
            "cluster-areal-workers-reaper",
        ),
        (
            {"reaper": {**REAPER, "serviceAccountName": "ops"}, "controllerRbac": {"create": True}},
            "reaper.serviceAccountName",
            "ops-areal-workers-reaper",
        ),
    ],
    ids=["controller", "controller-suffix-not-at-the-end", "reaper", "reaper-with-controllerRbac"],
)
def test_an_explicit_name_the_policy_would_not_match_is_refused(values, key, suggestion):
    error = render_error(values)
    name = (values.get("controllerRbac") if key.startswith("controllerRbac") else values["reaper"])[
        "serviceAccountName"
    ]
    assert f'{key} "{name}" is not matched by rbac/cluster/admission-policy.yaml' in error, error
    assert f"Set {key} to a name ending in areal-workers-" in error and f'"{suggestion}"' in error, error
    assert matched(NAMESPACE, suggestion)


def test_a_name_built_from_an_override_the_policy_would_not_match_is_refused():
    error = render_error({"controllerRbac": {"create": True}, "nameOverride": "Workers"})
    assert 'the controller ServiceAccount "rel-Workers-areal-workers-controller", built from the release name' in error
    assert "nameOverride and fullnameOverride" in error, error


def test_explicit_names_are_not_checked_where_the_release_does_not_use_them():
    """controllerRbac.serviceAccountName without controllerRbac.create, reaper.serviceAccountName without the reaper:
    nothing is rendered with them."""
    values = {"controllerRbac": {"serviceAccountName": "trainer"}, "reaper": {"serviceAccountName": "ops"}}
    assert not identities(render(values))["controller"]
