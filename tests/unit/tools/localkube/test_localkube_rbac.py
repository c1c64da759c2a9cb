"""rbac/cluster/admission-policy.yaml as a file (apart from rbac/'s namespaced objects), and the copy of it that
tools/localkube/rbac.py binds to one namespace of a shared cluster (its CEL runs in
tests/integration/test_admission_policy.py)."""

from __future__ import annotations

import re

import yaml

from localkube.rbac import CLUSTER_RBAC, POLICY_FILE, RBAC, scoped_policy

POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"


def documents() -> list[dict]:
    return [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]


def identity_pattern(policy: dict) -> str:
    [condition] = policy["spec"]["matchConditions"]
    found = re.fullmatch(r"request\.userInfo\.username\.matches\('(.+)'\)", condition["expression"].strip())
    assert found, condition
    return found.group(1)


def test_every_policy_has_a_binding_that_denies_in_every_namespace():
    policies = {d["metadata"]["name"]: d for d in documents() if d["kind"] == POLICY}
    bindings = {d["metadata"]["name"]: d for d in documents() if d["kind"] == BINDING}
    assert set(policies) == {"areal-controller-secrets", "areal-controller-statefulsets", "areal-controller-services"}
    assert set(bindings) == set(policies)
    for name, binding in bindings.items():
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    for policy in policies.values():
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert (
            "paramKind" not in policy["spec"]
        )  # the exceptions are namespace labels: the controller cannot write them


NAMESPACED_KINDS = {"ServiceAccount", "Role", "RoleBinding"}
CLUSTER_KINDS = {POLICY, BINDING}


def kinds(directory) -> dict[str, set[str]]:
    """The kinds of each YAML file directly in `directory`, as `kubectl apply -f DIRECTORY` reads it (no
    subdirectories without --recursive)."""
    return {
        path.name: {d["kind"] for d in yaml.safe_load_all(path.read_text()) if d}
        for path in sorted(directory.glob("*.yaml"))
    }


def test_rbac_holds_only_namespaced_objects_and_rbac_cluster_the_cluster_scoped_ones():
    # The deployment guide prepares and removes a namespace with kubectl apply/delete -n NS -f rbac/: a cluster-scoped
    # object in rbac/ would be deleted for every namespace by one namespace's removal.
    namespaced = kinds(RBAC)
    assert namespaced and all(found <= NAMESPACED_KINDS for found in namespaced.values()), namespaced
    assert kinds(CLUSTER_RBAC) == {POLICY_FILE.name: CLUSTER_KINDS}


def test_the_policies_match_the_controller_and_the_reaper_and_nobody_else():
    patterns = {identity_pattern(d) for d in documents() if d["kind"] == POLICY}
    [pattern] = patterns  # one identity for all three
    matched = [
        "system:serviceaccount:rl:areal-controller",  # rbac/serviceaccount.yaml
        "system:serviceaccount:rl:areal-reaper",  # rbac/reaper.yaml
        "system:serviceaccount:rl:demo-areal-workers-controller",  # the chart's controllerRbac, release "demo"
        "system:serviceaccount:rl:reaper-areal-workers-reaper",  # the chart's reaper, release "reaper"
        "system:serviceaccount:rl:areal-workers-infra-areal-workers-controller",  # release "areal-workers-infra"
    ]
    unmatched = [
        "kubernetes-admin",
        "system:admin",
        "system:serviceaccount:kube-system:statefulset-controller",
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:serviceaccount:cert-manager:cert-manager-controller",
        "system:serviceaccount:rl:default",
        "system:serviceaccount:rl:demo-areal-workers",  # the workers' own ServiceAccount
        "system:serviceaccount:rl:areal-workers-infra-controller",  # what the chart once named that release's
        "alice:areal-controller",
        "system:serviceaccount:rl:areal-controller:x",
    ]
    assert [name for name in matched if not re.fullmatch(pattern, name)] == []
    assert [name for name in unmatched if re.fullmatch(pattern, name)] == []


def test_the_copy_for_a_namespace_is_bound_to_it_alone_owned_by_it_and_otherwise_the_file():
    original = documents()
    copies = scoped_policy("t-ns", "uid-1")
    assert [d["kind"] for d in copies] == [d["kind"] for d in original]
    for copy_, source in zip(copies, original, strict=True):
        name = source["metadata"]["name"]
        assert copy_["metadata"]["name"] == f"{name}-t-ns"
        assert copy_["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Namespace", "name": "t-ns", "uid": "uid-1"}
        ]
        assert copy_["metadata"]["labels"] == source["metadata"]["labels"]
        if source["kind"] == POLICY:
            assert copy_["spec"] == source["spec"]
        else:
            assert copy_["spec"] == {
                **source["spec"],
                "policyName": f"{source['spec']['policyName']}-t-ns",
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "t-ns"}}},
            }
    assert documents() == original  # the file's objects are left as they were
