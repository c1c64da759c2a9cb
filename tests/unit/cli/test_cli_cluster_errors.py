"""How the areal-workers command names a failed request's cause, as the scheduler does (areal_workers.cluster_access):
a namespace that does not exist, a forbidden request (which user, which verb and resource, the rbac/ to apply, and
doctor), rejected credentials, an API server that does not answer; each on one line with exit 4. The answers are a
real apiserver's (bodies as kube-apiserver 1.34 sends them)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError

from areal_workers import KubernetesSchedulerConfig
from areal_workers.cli.commands import submit, workers
from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_CLUSTER, CliError, Session
from areal_workers.trainer.network import Endpoint

SERVER = "https://127.0.0.1:6443"
FORBIDDEN_CONFIGMAPS = (
    'configmaps is forbidden: User "system:serviceaccount:trainers:areal-controller" cannot list resource '
    '"configmaps" in API group "" in the namespace "rl"'
)


def api_error(status: int, message: str = "", details: dict | None = None) -> ApiException:
    error = ApiException(
        status=status, reason={401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}.get(status, "Error")
    )
    error.body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": {401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}.get(status, ""),
            "code": status,
            **({"details": details} if details else {}),
        }
    )
    return error


def namespace_not_found(name: str) -> ApiException:
    return api_error(404, f'namespaces "{name}" not found', {"name": name, "kind": "namespaces"})


def refused() -> MaxRetryError:
    return MaxRetryError(
        None,  # type: ignore[arg-type]
        "/api/v1/namespaces/rl/configmaps",
        NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused"),  # type: ignore[arg-type]
    )


def session(namespace: str = "rl") -> Session:
    """A command's Session whose API client is built (only its address is read)."""
    made = Session(KubernetesSchedulerConfig(namespace=namespace))
    made.__dict__["api"] = SimpleNamespace(configuration=SimpleNamespace(host=SERVER), close=lambda: None)
    return made


def failing(error: BaseException):
    def call(*args, **kwargs):
        raise error

    return call


def kube_error(error: BaseException, doing: str = "listing trials in namespace rl") -> CliError:
    with pytest.raises(CliError) as raised:
        session().kube(failing(error), doing)
    return raised.value


def test_a_forbidden_request_names_the_user_the_verb_and_resource_the_rbac_to_apply_and_doctor():
    error = kube_error(api_error(403, FORBIDDEN_CONFIGMAPS))
    text = str(error)
    assert error.exit_code == EXIT_CLUSTER and "\n" not in text
    assert text.startswith(
        "listing trials in namespace rl: user system:serviceaccount:trainers:areal-controller may not list "
        "configmaps in namespace rl"
    )
    assert "kubectl apply -n rl -f rbac/" in text and "kubectl create namespace rl" in text
    assert "`areal-workers doctor -n rl` lists each permission that is missing" in text


def test_rejected_credentials_are_a_401_not_a_permission():
    error = kube_error(api_error(401, "Unauthorized"))
    text = str(error)
    assert error.exit_code == EXIT_CLUSTER
    assert text.startswith(
        f"listing trials in namespace rl: the API server at {SERVER} rejected the credentials (401 Unauthorized)"
    )
    assert "rbac/" not in text and "doctor" not in text


def test_an_unreachable_api_server_names_its_address_and_the_command_lines_settings():
    error = kube_error(refused())
    text = str(error)
    assert error.exit_code == EXIT_CLUSTER
    assert text.startswith(f"listing trials in namespace rl: cannot reach the Kubernetes API server at {SERVER}: ")
    assert "Connection refused" in text and "--kubeconfig, --context" in text and "kubectl cluster-info" in text
    assert "rbac/" not in text


def test_a_namespace_that_does_not_exist_is_named_with_how_to_create_it_and_other_404s_stay_as_answered():
    error = kube_error(namespace_not_found("rl"))
    assert error.exit_code == EXIT_CLUSTER
    assert str(error) == (
        "listing trials in namespace rl: namespace rl does not exist: create it (kubectl create namespace rl) and "
        "give the trainer's identity the Role of rbac/ there (kubectl apply -n rl -f rbac/), or set the command's "
        "namespace (-n, or AREAL_K8S_NAMESPACE) to one that exists"
    )
    pod_gone = api_error(404, 'pods "aw-x-actor-0" not found', {"name": "aw-x-actor-0", "kind": "pods"})
    assert str(kube_error(pod_gone, "reading pod")) == "reading pod: the apiserver answered 404 Not Found"


class MissingNamespaceBatch:
    def create_namespaced_job(self, namespace: str, body: dict) -> None:
        raise namespace_not_found(namespace)


def test_submit_to_a_namespace_that_does_not_exist_says_so(monkeypatch):
    monkeypatch.setattr(submit.client, "BatchV1Api", lambda api: MissingNamespaceBatch())
    monkeypatch.setattr(submit, "discover_apiserver", lambda api: [Endpoint("192.0.2.1", 443)])
    with pytest.raises(CliError) as raised:
        submit.submit(
            session("bandit-demo"),
            None,
            {"image": "reg/areal:1", "name": "trainer-t"},
            ["python", "t.py"],
            False,
            False,
            60,
            "table",
        )
    assert raised.value.exit_code == EXIT_CLUSTER
    assert str(raised.value).startswith(
        "creating job trainer-t in namespace bandit-demo: namespace bandit-demo does not exist: create it "
        "(kubectl create namespace bandit-demo)"
    )


def test_a_request_no_command_caught_is_named_by_its_cause_on_one_line(monkeypatch, capsys):
    monkeypatch.setattr(workers, "status", failing(namespace_not_found("bandit-demo")))
    assert main(["-n", "bandit-demo", "status"]) == EXIT_CLUSTER
    err = capsys.readouterr().err
    assert err.startswith("error: status: namespace bandit-demo does not exist: create it") and err.count("\n") == 1
    assert "the apiserver answered" not in err
