"""`areal-workers doctor`'s admission policy check: a server-side dry run of a token Secret as the checked identity,
which passes when rbac/cluster/admission-policy.yaml refuses it, fails when the API server admits it, and says so
when RBAC refuses any Secret first. The refusals are worded as kube-apiserver 1.34 words them (tests/integration/
test_doctor_on_cluster.py checks them against the real one)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kubernetes import client

from areal_workers.cli.doctor.admission import check_admission_policy
from test_cluster_access import api_error

CONTROLLER = "system:serviceaccount:rl:areal-controller"
POLICY_REFUSAL = (
    "secrets \"areal-workers-doctor-x7k2p\" is forbidden: ValidatingAdmissionPolicy 'areal-controller-secrets' with "
    "binding 'areal-controller-secrets' denied request: the areal-workers controller may write and delete only Helm "
    "release Secrets (type helm.sh/release.v1), not Secret areal-workers-doctor-x7k2p of type "
    "kubernetes.io/service-account-token: have an administrator create it (rbac/cluster/admission-policy.yaml)"
)
RBAC_REFUSAL = (
    'secrets is forbidden: User "system:serviceaccount:rl:areal-controller" cannot create resource "secrets" in API '
    'group "" in the namespace "rl"'
)


class Core:
    """create_namespaced_secret answers with `error`, or admits the request; `asked` keeps what was sent."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.asked = error, []

    def create_namespaced_secret(self, namespace: str, body: client.V1Secret, **kwargs) -> client.V1Secret:
        self.asked.append((namespace, body, kwargs))
        if self.error is not None:
            raise self.error
        return body


class Authentication:
    def __init__(self, user: str | None) -> None:
        self.user = user

    def create_self_subject_review(self, body: client.V1SelfSubjectReview) -> client.V1SelfSubjectReview:
        if self.user is None:
            raise api_error(404, "the server could not find the requested resource")
        return SimpleNamespace(status=SimpleNamespace(user_info=SimpleNamespace(username=self.user)))


def check(core: Core, user: str | None = CONTROLLER):
    return check_admission_policy(core, Authentication(user), "rl")  # type: ignore[arg-type]


def test_the_probe_is_a_dry_run_of_a_token_secret_of_the_default_service_account():
    core = Core(api_error(403, POLICY_REFUSAL))
    check(core)
    [(namespace, body, kwargs)] = core.asked
    assert namespace == "rl" and kwargs == {"dry_run": "All"}
    assert body.type == "kubernetes.io/service-account-token"
    assert body.metadata.annotations == {"kubernetes.io/service-account.name": "default"}


@pytest.mark.parametrize("policy", ["areal-controller-secrets", "areal-controller-secrets-rl"])
def test_a_refusal_by_the_policy_passes(policy):
    result = check(Core(api_error(403, POLICY_REFUSAL.replace("'areal-controller-secrets'", f"'{policy}'", 1))))
    assert result.status == "pass" and result.fix == ""
    assert result.detail == f"{policy} refuses {CONTROLLER} a token Secret in namespace rl (a server-side dry run)"


@pytest.mark.parametrize("user", [CONTROLLER, None])
def test_an_admitted_token_secret_fails_with_how_to_apply_the_policy(user):
    result = check(Core(), user)
    assert result.status == "fail"
    assert result.detail.startswith(f"{user or 'this identity'} may create a token Secret of any ServiceAccount")
    assert "the admission policy is not in force for it" in result.detail
    assert "as a cluster administrator, apply rbac/cluster/admission-policy.yaml" in result.fix


def test_a_refusal_by_rbac_is_a_warning_that_the_policy_cannot_be_seen():
    result = check(Core(api_error(403, RBAC_REFUSAL)))
    assert result.status == "warn"
    assert result.detail.startswith(f"RBAC refuses {CONTROLLER} creating any Secret in namespace rl, before admission")
    assert "cannot create resource" in result.detail and "create on secrets" in result.fix


def test_a_refusal_by_another_policy_is_a_warning_naming_it():
    other = POLICY_REFUSAL.replace("'areal-controller-secrets'", "'no-tokens'")
    result = check(Core(api_error(403, other)))
    assert result.status == "warn" and "HTTP 403" in result.detail and "'no-tokens'" in result.detail
    assert "not the refusal of rbac/cluster/admission-policy.yaml" in result.fix


def test_a_person_is_skipped_without_a_request():
    core = Core()
    result = check(core, "kubernetes-admin")
    assert result.status == "skip" and core.asked == []
    assert result.detail.startswith("kubernetes-admin is not a ServiceAccount")
    assert "kubectl create token areal-controller -n rl" in result.fix
