"""rbac/ applied to one namespace of a shared cluster, for the tests and the demo.

`kubectl apply -n NS -f rbac/` applies the namespaced objects (the controller's and the reaper's ServiceAccount, Role
and RoleBinding). rbac/cluster/admission-policy.yaml's ValidatingAdmissionPolicies and bindings are cluster-scoped and
act on the controller's identity in every namespace. On a cluster many test runs share, applying them as written would
change what other runs' controllers may do (and a run of an older checkout would apply its own version over it). So
here the policy is
applied as a copy of its own, `areal-controller-<namespace>`, bound by a namespace selector to that namespace only and
owned by the Namespace object, so that the garbage collector deletes it with the namespace. Its rules are the file's,
unchanged. `apply_rbac` returns once the copy is in force (the policy informer of the API server has loaded it): a
server-side dry run of a Secret the policy refuses, made as the controller, is refused.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from pathlib import Path

import yaml

from repo_paths import REPO, TOOLS_BIN

RBAC = REPO / "rbac"
CLUSTER_RBAC = RBAC / "cluster"  # the cluster-scoped objects: kubectl apply -n NS -f rbac/ does not reach them
POLICY_FILE = CLUSTER_RBAC / "admission-policy.yaml"
CONTROLLER = "areal-controller"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every Namespace
IN_FORCE_TIMEOUT = 30.0


class RbacError(RuntimeError):
    pass


def policy_supported(kubeconfig: Path | str) -> bool:
    """Whether the API server serves admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies (GA in 1.30)."""
    done = _kubectl(kubeconfig, "get", "--raw", "/apis/admissionregistration.k8s.io/v1")
    if done.returncode != 0:
        return False
    return any(r.get("kind") == "ValidatingAdmissionPolicy" for r in json.loads(done.stdout).get("resources", []))


def _kubectl(kubeconfig: Path | str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TOOLS_BIN / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def scoped_policy(
    namespace: str, namespace_uid: str | None, text: str | None = None, namespaces: tuple[str, ...] = ()
) -> list[dict]:
    """rbac/cluster/admission-policy.yaml's policies and bindings, each named `<name>-<namespace>`, bound to that
    namespace alone (and to `namespaces`) and owned by it (`namespace_uid`; None: owned by nothing, for a namespace
    that does not exist yet)."""
    documents = [copy.deepcopy(d) for d in yaml.safe_load_all(text or POLICY_FILE.read_text()) if d]
    owner = [{"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": namespace_uid}]
    for document in documents:
        assert document["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"), document["kind"]
        document["metadata"]["name"] = f"{document['metadata']['name']}-{namespace}"
        if namespace_uid is not None:
            document["metadata"]["ownerReferences"] = owner
        if document["kind"] == "ValidatingAdmissionPolicyBinding":
            document["spec"]["policyName"] = f"{document['spec']['policyName']}-{namespace}"
            selector = (
                {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}
                if not namespaces
                else {
                    "matchExpressions": [
                        {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": [namespace, *namespaces]}
                    ]
                }
            )
            document["spec"]["matchResources"] = {"namespaceSelector": selector}
    return documents


def apply_rbac(kubeconfig: Path | str, namespace: str, policy: bool = True) -> bool:
    """rbac/'s namespaced objects in `namespace`, and (`policy`, where the API server has ValidatingAdmissionPolicies)
    the admission policy bound to that namespace alone, in force. True when the policy acts in the namespace."""
    done = _kubectl(kubeconfig, "apply", "-n", namespace, "-f", str(RBAC))  # not rbac/cluster/: no --recursive
    if done.returncode != 0:
        raise RbacError(f"kubectl apply -n {namespace} -f rbac/: {done.stderr.strip()}")
    if not (policy and policy_supported(kubeconfig)):
        return False
    found = _kubectl(kubeconfig, "get", "namespace", namespace, "-o", "jsonpath={.metadata.uid}")
    if found.returncode != 0:
        raise RbacError(f"namespace {namespace}: {found.stderr.strip()}")
    documents = scoped_policy(namespace, found.stdout.strip())
    done = _kubectl(
        kubeconfig, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
    )
    if done.returncode != 0:
        raise RbacError(f"applying the admission policy for {namespace}: {done.stderr.strip()}")
    wait_in_force(kubeconfig, namespace)
    return True


SECRET_PROBE = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "policy-probe"}, "type": "Opaque"}
# One object each policy refuses, and a piece of its message: the API server loads the three policies one by one.
PROBES = [
    (SECRET_PROBE, "helm.sh/release.v1"),
    (
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "policy-probe"},
            "spec": {"type": "NodePort", "ports": [{"port": 80}], "selector": {"app": "policy-probe"}},
        },
        "may create only ClusterIP Services",
    ),
    (
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "policy-probe"},
            "spec": {
                "selector": {"matchLabels": {"app": "policy-probe"}},
                "template": {
                    "metadata": {"labels": {"app": "policy-probe"}},
                    "spec": {"containers": [{"name": "probe", "image": "policy-probe"}]},
                },
            },
        },
        "has no app.kubernetes.io/instance label",
    ),
]


def refused_as_controller(kubeconfig: Path | str, namespace: str, probe: dict | None = None) -> str:
    """The error of a server-side dry run, as the controller, of `probe` (an Opaque Secret): the policy's message once
    it is in force, "" while the API server admits it."""
    probe = probe or SECRET_PROBE
    done = _kubectl(
        kubeconfig,
        "create",
        "-n",
        namespace,
        "--dry-run=server",
        f"--as=system:serviceaccount:{namespace}:{CONTROLLER}",
        "-f",
        "-",
        stdin=json.dumps(probe),
    )
    return "" if done.returncode == 0 else done.stderr.strip()


def wait_in_force(kubeconfig: Path | str, namespace: str, timeout: float = IN_FORCE_TIMEOUT) -> None:
    """Until each of the three policies refuses its probe (PROBES): the Secrets policy in force alone left a test of
    the Services policy run before the API server had loaded it."""
    deadline = time.monotonic() + timeout
    for probe, refusal in PROBES:
        while True:
            refused = refused_as_controller(kubeconfig, namespace, probe)
            if refusal in refused:
                break
            if refused and "denied request" not in refused:  # not the policy: e.g. the ServiceAccount lacks the Role
                raise RbacError(f"probing the admission policy in {namespace} with a {probe['kind']}: {refused}")
            if time.monotonic() > deadline:
                raise RbacError(
                    f"the admission policy for {namespace} does not refuse a {probe['kind']} after {timeout:.0f}s"
                )
            time.sleep(0.2)
