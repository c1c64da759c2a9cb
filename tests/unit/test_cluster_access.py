"""The namespace check a scheduler makes before it touches anything, and the cause it names for a failed request:
an API server that does not answer, credentials it rejects, a namespace that does not exist, a namespace where this
identity has no Role. The answers are those of a real apiserver (bodies as kube-apiserver 1.34 sends them); the
same checks run against the local cluster in tests/integration/test_first_contact.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError

from areal_workers import ClusterAccessError
from areal_workers.cluster_access import SCHEDULER, Settings, api_failure, attempted, check_namespace

SERVER = "https://127.0.0.1:6443"
FORBIDDEN_LEASE = (
    'leases.coordination.k8s.io "aw-x-trainer" is forbidden: User '
    '"system:serviceaccount:trainers:areal-controller" cannot get resource "leases" in API group '
    '"coordination.k8s.io" in the namespace "bandit-demo"'
)


def api_error(status: int, message: str = "", details: dict | None = None) -> ApiException:
    error = ApiException(
        status=status,
        reason={401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict"}.get(status, "Error"),
    )
    error.body = json.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "message": message,
            "code": status,
            **({"details": details} if details else {}),
        }
    )
    return error


def refused() -> MaxRetryError:
    return MaxRetryError(
        None,
        "/api/v1/namespaces/x",  # type: ignore[arg-type]
        NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused"),
    )  # type: ignore[arg-type]


def test_a_namespace_that_is_not_found_is_named_with_the_commands_that_create_it():
    error = api_failure(
        api_error(404, 'namespaces "bandit-demo" not found', {"name": "bandit-demo", "kind": "namespaces"}),
        "bandit-demo",
        SERVER,
        "create a Lease",
    )
    assert error is not None and error.cause == "namespace-missing"
    assert str(error).startswith(
        "namespace bandit-demo does not exist: create it (kubectl create namespace bandit-demo)"
    )
    assert "kubectl apply -n bandit-demo -f rbac/" in str(error)
    assert "rbac/ (leases" not in str(error)


def test_forbidden_names_the_user_and_both_possible_causes():
    error = api_failure(api_error(403, FORBIDDEN_LEASE), "bandit-demo", SERVER, "keep the trainer's Lease")
    assert error is not None and error.cause == "forbidden"
    text = str(error)
    assert text.startswith(
        "user system:serviceaccount:trainers:areal-controller may not keep the trainer's Lease in namespace bandit-demo"
    )
    assert "the namespace does not exist" in text and "no RoleBinding there grants the Role of rbac/" in text
    assert "kubectl create namespace bandit-demo" in text and "areal-workers doctor -n bandit-demo" in text


def test_rejected_credentials_are_not_blamed_on_rbac():
    error = api_failure(api_error(401, "Unauthorized"), "rl", SERVER, "list pods")
    assert error is not None and error.cause == "unauthorized"
    assert "rejected the credentials (401 Unauthorized)" in str(error) and "rbac/" not in str(error)


def test_an_unreachable_api_server_is_named_with_its_address():
    error = api_failure(refused(), "rl", SERVER, "list pods")
    assert error is not None and error.cause == "unreachable"
    assert str(error).startswith(f"cannot reach the Kubernetes API server at {SERVER}: ")
    assert "Connection refused" in str(error) and "kubectl cluster-info" in str(error)


@pytest.mark.parametrize(
    "error",
    [
        api_error(
            404,
            'leases.coordination.k8s.io "aw-x-trainer" not found',
            {"name": "aw-x-trainer", "group": "coordination.k8s.io", "kind": "leases"},
        ),
        api_error(409, "conflict"),
        api_error(422, "invalid"),
    ],
)
def test_answers_that_are_not_about_access_are_left_to_the_caller(error):
    assert api_failure(error, "rl", SERVER, "renew") is None


class Core:
    """read_namespace and list_namespaced_pod answering as the apiserver would for one identity."""

    def __init__(self, namespace_read: object, pods_list: object = None) -> None:
        self.api_client = SimpleNamespace(configuration=SimpleNamespace(host=SERVER))
        self.namespace_read, self.pods_list = namespace_read, pods_list
        self.calls: list[str] = []

    def _answer(self, answer: object) -> object:
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def read_namespace(self, name: str) -> object:
        self.calls.append(f"read namespace {name}")
        return self._answer(self.namespace_read)

    def list_namespaced_pod(self, namespace: str, limit: int) -> object:
        self.calls.append(f"list pods in {namespace}")
        return self._answer(self.pods_list)


def namespace(phase: str) -> client.V1Namespace:
    return client.V1Namespace(metadata=client.V1ObjectMeta(name="rl"), status=client.V1NamespaceStatus(phase=phase))


def test_an_existing_namespace_passes_with_one_read():
    core = Core(namespace("Active"))
    check_namespace(core, "rl")  # type: ignore[arg-type]
    assert core.calls == ["read namespace rl"]


def test_an_administrator_is_told_the_namespace_does_not_exist():
    core = Core(api_error(404, 'namespaces "rl" not found', {"name": "rl", "kind": "namespaces"}))
    with pytest.raises(ClusterAccessError, match=r"^namespace rl does not exist: create it") as raised:
        check_namespace(core, "rl")  # type: ignore[arg-type]
    assert raised.value.cause == "namespace-missing"


def test_the_namespace_missing_message_is_one_line_naming_the_readers_own_setting():
    """The scheduler's (what a trainer's log shows of its constructor) and another reader's (the CLI's -n)."""
    core = Core(api_error(404, 'namespaces "bandit-demo" not found', {"name": "bandit-demo", "kind": "namespaces"}))
    messages = []
    for settings in (SCHEDULER, Settings(namespace="the command's namespace (-n)", credentials="--kubeconfig")):
        with pytest.raises(ClusterAccessError) as raised:
            check_namespace(core, "bandit-demo", settings)  # type: ignore[arg-type]
        messages.append(str(raised.value))
    assert not any("\n" in message for message in messages), messages
    assert messages[0].endswith("or set the scheduler's namespace (AREAL_K8S_NAMESPACE) to one that exists")
    assert messages[1].endswith("or set the command's namespace (-n) to one that exists")


def test_an_unreachable_server_is_named_with_the_readers_own_settings():
    settings = Settings(namespace="-n", credentials="--kubeconfig and --context")
    with pytest.raises(ClusterAccessError, match="; check --kubeconfig and --context and that the cluster is up"):
        check_namespace(Core(refused()), "rl", settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "refused_request"),
    [
        (FORBIDDEN_LEASE, "get leases.coordination.k8s.io"),
        (
            'pods "x" is forbidden: User "u" cannot get resource "pods/log" in API group "" in the namespace "rl"',
            "get pods/log",
        ),
        (
            'User "u" cannot patch resource "statefulsets/scale" in API group "apps" in the namespace "rl"',
            "patch statefulsets.apps/scale",
        ),
        ("forbidden", None),
    ],
)
def test_the_refused_request_is_read_from_the_answer_in_kubectls_spelling(message, refused_request):
    assert attempted(message) == refused_request


def test_a_namespace_being_deleted_is_refused():
    with pytest.raises(ClusterAccessError, match="namespace rl is being deleted") as raised:
        check_namespace(Core(namespace("Terminating")), "rl")  # type: ignore[arg-type]
    assert raised.value.cause == "namespace-terminating"


def test_a_namespaced_identity_that_may_list_pods_there_passes():
    """rbac/'s Role cannot read Namespace objects (cluster-scoped): a namespaced read decides."""
    core = Core(
        api_error(
            403,
            'namespaces "rl" is forbidden: User "system:serviceaccount:rl:areal-controller" '
            'cannot get resource "namespaces" in API group "" in the namespace "rl"',
        ),
        client.V1PodList(items=[]),
    )
    check_namespace(core, "rl")  # type: ignore[arg-type]
    assert core.calls == ["read namespace rl", "list pods in rl"]


def test_a_namespaced_identity_without_a_role_there_gets_both_causes():
    core = Core(
        api_error(403, "namespaces forbidden"),
        api_error(
            403,
            'pods is forbidden: User "system:serviceaccount:a:areal-controller" cannot list '
            'resource "pods" in API group "" in the namespace "rl"',
        ),
    )
    with pytest.raises(ClusterAccessError) as raised:
        check_namespace(core, "rl")  # type: ignore[arg-type]
    assert raised.value.cause == "forbidden"
    assert "user system:serviceaccount:a:areal-controller may not list pods in namespace rl" in str(raised.value)


def test_an_unreachable_server_is_not_a_namespace_problem():
    with pytest.raises(ClusterAccessError, match=f"cannot reach the Kubernetes API server at {SERVER}") as raised:
        check_namespace(Core(refused()), "rl")  # type: ignore[arg-type]
    assert raised.value.cause == "unreachable"
