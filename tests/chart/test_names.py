import hashlib
import re

from areal_workers import __version__
from chartlib import RELEASE, find, one, role, sts

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
SELECTOR_KEYS = {"app.kubernetes.io/name", "app.kubernetes.io/instance", "areal.io/role"}
LONG_RELEASE = "a-very-long-release-name-for-areal"  # 34 chars
FULL = f"{LONG_RELEASE}-areal-workers"


def test_role_underscores_become_dashes(render):
    docs = render({"roles": {"actor_main": role()}})
    s = sts(docs, "actor_main")
    assert s["metadata"]["name"] == f"{RELEASE}-areal-workers-actor-main"
    assert s["metadata"]["labels"]["areal.io/role"] == "actor_main"
    assert s["metadata"]["annotations"]["areal.io/role-name"] == "actor_main"


def test_long_names_are_cut_to_52_with_a_hash_of_the_full_name(render):
    roles = {"rollout_worker_group_one": role(), "rollout_worker_group_two": role()}
    docs = render({"roles": roles}, release=LONG_RELEASE)
    names = []
    for key in roles:
        full = f"{FULL}-{key.replace('_', '-')}"
        assert len(full) > 52
        expected = f"{full[:43].rstrip('-')}-{hashlib.sha256(full.encode()).hexdigest()[:8]}"
        s = sts(docs, key)
        assert s["metadata"]["name"] == expected
        assert len(expected) <= 52
        assert one(docs, "Service", expected)["spec"]["selector"]["areal.io/role"] == key
        names.append(expected)
    assert names[0] != names[1] and names[0][:43] == names[1][:43]


def test_names_at_the_limit_are_kept_whole(render):
    key = "r" * (52 - len(FULL) - 1)
    docs = render({"roles": {key: role()}}, release=LONG_RELEASE)
    assert sts(docs, key)["metadata"]["name"] == f"{FULL}-{key}"


def test_every_object_name_is_a_dns_label(render):
    roles = {"a_b": role(), "c" * 40: role(), "x-y_z9": role()}
    docs = render({"roles": roles, "forks": {"f_" + "p" * 30: {"target": "a_b", "mode": "pod"}}}, release=LONG_RELEASE)
    for doc in docs:
        name = doc["metadata"]["name"]
        assert DNS_LABEL.match(name) and len(name) <= 63, name
    for s in find(docs, "StatefulSet"):
        assert len(s["metadata"]["name"]) <= 52


def test_colliding_sanitized_names_fail(render_error):
    err = render_error({"roles": {"ref_model": role(), "ref-model": role()}})
    assert "roles.ref-model and roles.ref_model both become the object name" in err
    err = render_error({"roles": {"ref-model": role()}, "forks": {"ref_model": {"target": "ref-model", "mode": "pod"}}})
    assert "roles.ref-model and forks.ref_model both become the object name" in err


def test_label_values_are_sanitized_and_raw_names_annotated(render):
    experiment = "GSM8K grpo:run #1 " + "x" * 80  # one directory name ("/" is refused: it would be two)
    docs = render({"experiment": experiment, "trial": "_trial.", "roles": {"a": role()}})
    for doc in docs:
        labels = doc["metadata"]["labels"]
        for key in ("areal.io/experiment", "areal.io/trial"):
            assert LABEL_VALUE.match(labels[key]) and len(labels[key]) <= 63, labels[key]
        assert doc["metadata"]["annotations"]["areal.io/experiment-name"] == experiment
    labels = sts(docs, "a")["metadata"]["labels"]
    assert labels["areal.io/experiment"].startswith("GSM8K-grpo-run--1-x")
    assert labels["areal.io/experiment"].endswith(hashlib.sha256(experiment.encode()).hexdigest()[:8])
    assert labels["areal.io/trial"] == "trial"


def test_standard_labels_everywhere(render):
    docs = render({"roles": {"a": role()}, "controllerRbac": {"create": True}})
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "areal-workers"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "1.0.4"
        assert labels["app.kubernetes.io/part-of"] == "areal"
        assert labels["helm.sh/chart"] == f"areal-workers-{__version__}"
        assert labels["areal.io/experiment"] == "areal" and labels["areal.io/trial"] == "trial0"
        assert "app.kubernetes.io/component" in labels
    s = sts(docs, "a")
    assert s["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    pod_labels = s["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["areal.io/role"] == "a" and pod_labels["app.kubernetes.io/component"] == "worker"


OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "trainer", "uid": "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a"}


def test_owner_references_on_every_object_but_the_test_hook_and_controller_rbac(render):
    """A template added later carries the owner too, or this names it (the helm-unittest suite checks the kinds)."""
    values = {
        "roles": {"a": role(2)},
        "forks": {"f": {"target": "a", "mode": "pod"}},
        "controllerRbac": {"create": True},
    }
    assert not [d for d in render(values) if "ownerReferences" in d["metadata"]]
    docs = render({**values, "ownerReferences": [OWNER]})
    exempt = {"test", "controller"}  # the helm test hook Pod; the controllerRbac ServiceAccount, Role and RoleBinding
    owned = [d for d in docs if d["metadata"]["labels"]["app.kubernetes.io/component"] not in exempt]
    assert sorted({d["kind"] for d in owned}) == [
        "ConfigMap",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
        "StatefulSet",
    ]
    wrong = [(d["kind"], d["metadata"]["name"]) for d in owned if d["metadata"].get("ownerReferences") != [OWNER]]
    assert not wrong, wrong
    kept_off = [
        (d["kind"], d["metadata"]["name"]) for d in docs if d not in owned and "ownerReferences" in d["metadata"]
    ]
    assert not kept_off and len(docs) - len(owned) == 4, kept_off
    assert not [
        d for d in owned if d["kind"] == "StatefulSet" and "ownerReferences" in d["spec"]["template"]["metadata"]
    ]


def test_selectors_use_only_stable_labels(render):
    docs = render(
        {
            "roles": {
                "a": role(
                    topologySpreadConstraints=[
                        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
                    ]
                )
            },
            "forks": {"p": {"target": "a", "mode": "pod"}},
        }
    )
    selectors = []
    for s in find(docs, "StatefulSet"):
        selectors.append(s["spec"]["selector"]["matchLabels"])
        spec = s["spec"]["template"]["spec"]
        selectors += [c["labelSelector"]["matchLabels"] for c in spec.get("topologySpreadConstraints", [])]
        for kind in ("podAffinity", "podAntiAffinity"):
            for term in (
                spec.get("affinity", {}).get(kind, {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])
            ):
                selectors.append(term["labelSelector"]["matchLabels"])
        assert set(s["spec"]["selector"]["matchLabels"]) == SELECTOR_KEYS
        template_labels = s["spec"]["template"]["metadata"]["labels"]
        assert s["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
    selectors += [svc["spec"]["selector"] for svc in find(docs, "Service")]
    selectors.append(one(docs, "NetworkPolicy", f"{RELEASE}-areal-workers")["spec"]["podSelector"]["matchLabels"])
    assert len(selectors) >= 7
    for sel in selectors:
        assert set(sel) <= SELECTOR_KEYS, sel
        assert not any("version" in k or k == "helm.sh/chart" for k in sel)


def test_yaml_ambiguous_names_stay_strings(render):
    """Names such as on/off/y/yes would turn into booleans if rendered bare (YAML 1.1)."""
    docs = render(
        {"fullnameOverride": "yes", "roles": {"on": role(), "off": role(guardPort=9000), "y": role(guardPort=9100)}},
        release="no",
        namespace="on",
    )
    for doc in docs:
        meta = doc["metadata"]
        assert isinstance(meta["name"], str) and meta["namespace"] == "on"
        assert all(isinstance(v, str) for v in meta["labels"].values()), meta["labels"]
    assert one(docs, "ServiceAccount")["metadata"]["name"] == "yes"
    for key in ("on", "off", "y"):
        s = sts(docs, key)
        assert s["spec"]["selector"]["matchLabels"] == {
            "app.kubernetes.io/name": "areal-workers",
            "app.kubernetes.io/instance": "no",
            "areal.io/role": key,
        }
        assert s["spec"]["template"]["spec"]["serviceAccountName"] == "yes"
