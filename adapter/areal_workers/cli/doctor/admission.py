"""`areal-workers doctor`'s check that rbac/cluster/admission-policy.yaml is in force for the checked identity (the
kubeconfig's) in the namespace: a server-side dry run (dryRun=All: authorization and admission run, nothing is
stored) of what the policy exists to refuse, a token Secret of the namespace's `default` ServiceAccount. Admitted:
this identity could mint and read the token of any ServiceAccount there, so the check fails. Refused by the policy:
it passes. Refused by RBAC: the identity may create no Secret at all and the policy cannot be seen from it (a
warning). A person's identity is not one the policy is for: the check is skipped, with how to run it as the
trainer's ServiceAccount."""

from __future__ import annotations

import re

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..session import api_message
from .check import Check

NAME = "admission policy"
POLICY_FILE = "rbac/cluster/admission-policy.yaml"
# The policy's name as the API server quotes it in a refusal; a copy bound to one namespace keeps it as a prefix
# (tools/localkube/rbac.py names the copies of the tests areal-controller-secrets-<namespace>).
POLICY = "areal-controller-secrets"
REFUSED_BY = re.compile(r"ValidatingAdmissionPolicy '([^']+)'")
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def probe_secret() -> client.V1Secret:
    """A token Secret of the `default` ServiceAccount: the token controller would fill it, were it stored."""
    return client.V1Secret(
        metadata=client.V1ObjectMeta(
            generate_name="areal-workers-doctor-",
            annotations={"kubernetes.io/service-account.name": "default"},
        ),
        type="kubernetes.io/service-account-token",
    )


def username(authentication: client.AuthenticationV1Api) -> str | None:
    """Who the API server takes this identity for (a SelfSubjectReview; None when it cannot say)."""
    try:
        review = authentication.create_self_subject_review(client.V1SelfSubjectReview())
    except ApiException:
        return None
    info = review.status.user_info if review.status is not None else None
    return info.username if info is not None else None


def check_admission_policy(core: client.CoreV1Api, authentication: client.AuthenticationV1Api, namespace: str) -> Check:
    user = username(authentication)
    if user is not None and not user.startswith(SERVICE_ACCOUNT_PREFIX):
        return Check(
            NAME,
            "skip",
            f"{user} is not a ServiceAccount: the policy restricts the controller's and the reaper's ServiceAccounts",
            "to check it for the trainer, run areal-workers doctor with its ServiceAccount's credentials (a "
            f"kubeconfig of `kubectl create token areal-controller -n {namespace}`)",
        )
    who = user or "this identity"
    try:
        core.create_namespaced_secret(namespace, probe_secret(), dry_run="All")
    except ApiException as error:
        return _refused(error, who, namespace)
    return Check(
        NAME,
        "fail",
        f"{who} may create a token Secret of any ServiceAccount of namespace {namespace} (a server-side dry run was "
        f"admitted), and read its token: the admission policy is not in force for it",
        f"as a cluster administrator, apply {POLICY_FILE} (kubectl apply -f {POLICY_FILE}; Kubernetes 1.30+); it "
        "restricts the controller's and the reaper's ServiceAccounts by name, so run the trainer as one of them "
        "(docs/en/rbac.md#the-admission-policy)",
    )


def _refused(error: ApiException, who: str, namespace: str) -> Check:
    message = api_message(error)
    policy = REFUSED_BY.search(message)
    if error.status == 403 and policy is not None and policy.group(1).startswith(POLICY):
        return Check(
            NAME,
            "pass",
            f"{policy.group(1)} refuses {who} a token Secret in namespace {namespace} (a server-side dry run)",
        )
    if error.status == 403 and "cannot create resource" in message:
        return Check(
            NAME,
            "warn",
            f"RBAC refuses {who} creating any Secret in namespace {namespace}, before admission: whether the policy "
            f"is in force cannot be seen from this identity ({message})",
            "helm needs create on secrets (rbac/role.yaml): once the permission check of it passes, run doctor again",
        )
    return Check(
        NAME,
        "warn",
        f"a server-side dry run of a token Secret in namespace {namespace} answered HTTP {error.status}: {message}",
        f"not the refusal of {POLICY_FILE}: if another admission control refuses token Secrets, this identity "
        f"cannot mint them either; otherwise apply {POLICY_FILE} as a cluster administrator",
    )
