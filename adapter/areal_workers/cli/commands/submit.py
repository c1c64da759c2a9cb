"""`areal-workers submit -f trainer.yaml -- python train.py ...`: the trainer as a Job in the namespace, its log
streamed here, and the trainer's own exit code as the command's. A pod the Job's controller cannot create (refused
by PodSecurity admission, a missing ServiceAccount, a webhook) ends the wait with the Job's FailedCreate event."""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ... import diagnosis
from ...pods.watch import WaitTimedOut
from ...trainer import metrics as trainer_metrics
from ...trainer.env import env_references
from ...trainer.job import TrainerSpec, load_spec, trainer_job
from ...trainer.network import (
    apiserver_from_env,
    discover_apiserver,
    opens_all_egress,
    parse_endpoint,
    trainer_network_policy,
)
from .. import log_stream
from ..command import Command, Invocation, duration_option
from ..output import Format, console, emit
from ..pod_monitor import create_pod_monitor
from ..session import EXIT_OK, EXIT_PROBLEM, EXIT_TIMEOUT, EXIT_USAGE, CliError, Session, api_message
from ..trainer_attempts import ended
from .trainer_creation import delete_job, watch_creation

FINISHED = ("Succeeded", "Failed")
LOG_DRAIN_SECONDS = 2.0  # for the last lines after the pod has finished
EVENT_CHECK_SECONDS = 1.0  # how often the Job's events are read while it has no pod
BACKOFF_ALLOWANCE = 6 * 60.0  # the Job controller's back-off before an attempt (10 s doubling, at most 6 minutes)


def _started_or_failed(pods: dict[str, client.V1Pod]) -> bool:
    for pod in pods.values():
        if pod.status.phase in ("Running", *FINISHED):
            return True
        problem = diagnosis.diagnose_pod(pod)
        if problem is not None and problem.fatal:
            hint = (
                "\n(in a submit file: pod_security_context, e.g. runAsUser: a uid the image can run as)"
                if "podSecurityContext" in problem.advice
                else ""
            )
            raise CliError(f"the trainer pod cannot start:\n{problem.render()}{hint}", EXIT_PROBLEM)
    return False


def _pod_states(session: Session, selector: str) -> str:
    try:
        pods = session.core.list_namespaced_pod(session.namespace, label_selector=selector).items
    except (ApiException, HTTPError, ConnectionError):
        return "its pods could not be listed"
    return "; ".join(f"{p.metadata.name}: {p.status.phase}" for p in pods) or "no pod yet"


def _finished(name: str) -> Callable[[dict[str, client.V1Pod]], bool]:
    """The attempt's pod finished, or is gone (deleted: the Job counts it as failed)."""

    def check(pods: dict[str, client.V1Pod]) -> bool:
        pod = pods.get(name)
        return pod is None or pod.status.phase in FINISHED

    return check


def _next_attempt(seen: set[str]) -> Callable[[dict[str, client.V1Pod]], bool]:
    """A pod of the Job that no earlier attempt ran has started (or cannot start: raised)."""

    def check(pods: dict[str, client.V1Pod]) -> bool:
        return _started_or_failed({name: pod for name, pod in pods.items() if name not in seen})

    return check


def _exit_code(pod: client.V1Pod) -> int:
    for status in pod.status.container_statuses or []:
        if status.state and status.state.terminated is not None:
            return int(status.state.terminated.exit_code)
    return EXIT_OK if pod.status.phase == "Succeeded" else EXIT_PROBLEM


def _open_log(session: Session, pod: str, timeout: float) -> Any:
    """The trainer's log, followed; a log that cannot be read yet (400: the container is still being created) is
    retried until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return session.core.read_namespaced_pod_log(pod, session.namespace, follow=True, _preload_content=False)
        except ApiException as error:
            if error.status != 400 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _follow_until_finished(session: Session, pod: str, selector: str, start_timeout: float) -> client.V1Pod | None:
    """Copies the log while the pod runs; returns the finished pod (None: deleted). The stream is closed once the pod
    has finished (a log server may keep following a file whose writer is gone)."""
    response = _open_log(session, pod, start_timeout)
    reader = log_stream.start_copy(response)
    try:
        finished = session.pods().wait(selector, _finished(pod), 365 * 86400.0)
    finally:
        log_stream.stop_copy(response, reader, LOG_DRAIN_SECONDS)
    return finished.get(pod)


def _follow_attempts(session: Session, name: str, first: str, restarts: int, start_timeout: float) -> int:
    """Follows each attempt's log until one succeeds or none is left; the last attempt's exit code."""
    err, selector, seen = console(stderr=True), f"job-name={name}", {first}
    attempt, pod_name = 1, first
    while True:
        pod = _follow_until_finished(session, pod_name, selector, start_timeout)
        code = _exit_code(pod) if pod is not None else EXIT_PROBLEM
        if (pod is not None and pod.status.phase == "Succeeded") or attempt > restarts:
            end = pod.status.phase.lower() if pod is not None else "was deleted"
            err.print(
                f"trainer {pod_name} {end} with exit code {code} (attempt {attempt} of {restarts + 1}: {ended(pod)})"
            )
            return code
        err.print(
            f"trainer {pod_name}, attempt {attempt} of {restarts + 1}, ended ({ended(pod)}); the Job starts the "
            f"next attempt, which takes over the trial's Lease and its workers, restarted in place"
        )
        with err.status(f"waiting for attempt {attempt + 1} of job {name} to start"):
            started = session.pods().wait(selector, _next_attempt(seen), start_timeout + BACKOFF_ALLOWANCE)
        pod_name = next(n for n in started if n not in seen)
        seen.add(pod_name)
        attempt += 1


def _network_policy(session: Session, spec: TrainerSpec, job: dict[str, Any]) -> dict[str, Any] | None:
    """The trainer pod's NetworkPolicy, with the API server's address from the submit file, else from its env's
    KUBERNETES_SERVICE_HOST, else from the cluster."""
    settings = spec.network_policy
    if not settings["enabled"]:
        return None
    endpoints = [parse_endpoint(text, "network_policy.apiserver") for text in settings["apiserver"]]
    if not endpoints and not opens_all_egress(settings["egress"]):
        endpoints = apiserver_from_env(spec.env)
    if not endpoints and not opens_all_egress(settings["egress"]):
        try:
            endpoints = discover_apiserver(session.api)
        except ApiException as error:
            raise CliError(
                f"the trainer's NetworkPolicy admits the API server by address, and reading it (Service and "
                f"EndpointSlices kubernetes in namespace default) failed: {api_message(error)}. Give it in the "
                f"submit file (network_policy: {{apiserver: ['IP:port']}}, as the trainer's pod reaches it; "
                f"kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes shows it), or "
                f"open the trainer's egress (network_policy: {{egress: [{{}}]}})",
                EXIT_USAGE,
            ) from None
        except (HTTPError, ConnectionError) as error:
            raise session.cluster_error(
                error, "reading the API server's address (Service default/kubernetes)"
            ) from None
    return trainer_network_policy(job, endpoints, settings["egress"], trainer_metrics.ingress_rules(spec.metrics))


def _create_network_policy(session: Session, policy: dict[str, Any], job: client.V1Job) -> None:
    """The policy, owned by the Job so it goes with it. Created right after the Job: the Job's pod starts its
    trainer seconds later and AReaL listens only once the release's workers exist. Without the policy the Job is
    deleted again."""
    policy = copy.deepcopy(policy)
    policy["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job.metadata.name, "uid": job.metadata.uid}
    ]
    name, namespace = policy["metadata"]["name"], session.namespace
    networking = client.NetworkingV1Api(session.api)
    try:
        try:
            networking.create_namespaced_network_policy(namespace, policy)
        except ApiException as error:
            if error.status != 409:  # a finished Job's policy the garbage collector has not removed yet
                raise
            networking.replace_namespaced_network_policy(name, namespace, policy)
    except (ApiException, HTTPError, ConnectionError) as error:
        note = delete_job(session, job.metadata.name)
        deleted = f"job {job.metadata.name} was deleted again" if note.startswith("deleted") else note
        reason = api_message(error) if isinstance(error, ApiException) else str(error)
        raise CliError(
            f"cannot create NetworkPolicy {name} for the trainer ({reason}); the trainer holds the controller's "
            f"token and must not run unisolated, so {deleted}. Let whoever submits create networkpolicies in the "
            "namespace (docs/en/rbac.md), or set network_policy: {enabled: false} in the submit file where another "
            "policy isolates the trainer",
            EXIT_PROBLEM,
        ) from None


def submit(
    session: Session,
    spec_file: str | None,
    overrides: dict[str, Any],
    command: list[str],
    dry_run: bool,
    detach: bool,
    start_timeout: float,
    fmt: Format,
) -> int:
    spec = load_spec(Path(spec_file) if spec_file else None, overrides)
    manifest = trainer_job(spec, command, session.namespace)
    policy = _network_policy(session, spec, manifest)
    monitor = trainer_metrics.pod_monitor(manifest, spec.metrics)
    if dry_run:
        documents = [manifest, *([policy] if policy else []), *([monitor] if monitor else [])]
        if fmt == "json":
            emit({"apiVersion": "v1", "kind": "List", "items": documents}, "json")
        else:
            print(yaml.safe_dump_all(documents, sort_keys=False), end="")
        return EXIT_OK
    name = manifest["metadata"]["name"]
    batch = client.BatchV1Api(session.api)
    try:
        created = batch.create_namespaced_job(session.namespace, manifest)
    except ApiException as error:
        if error.status == 409:
            raise CliError(
                f"job {name} already exists in namespace {session.namespace}: delete it (kubectl delete "
                f"job {name}) or choose another name (--name)",
                EXIT_USAGE,
            ) from None
        if error.status == 422:  # invalid, e.g. a securityContext with privileged and not allowPrivilegeEscalation
            raise CliError(
                f"the apiserver refuses job {name} as invalid: {api_message(error)}; change that in the submit "
                "file (areal-workers submit --dry-run prints the Job); nothing was created",
                EXIT_USAGE,
            ) from None
        raise session.cluster_error(error, f"creating job {name} in namespace {session.namespace}") from None
    except (HTTPError, ConnectionError) as error:
        raise session.cluster_error(error, f"creating job {name} in namespace {session.namespace}") from None
    if policy is not None:
        _create_network_policy(session, policy, created)
    err = console(stderr=True)
    err.print(f"submitted job {name} in namespace {session.namespace}")
    if monitor is not None and (problem := create_pod_monitor(session, monitor, created)) is not None:
        err.print(f"{problem}; the trainer runs unscraped", markup=False)
    if detach:
        return EXIT_OK
    selector = f"job-name={name}"
    pods = session.pods()
    service_account = manifest["spec"]["template"]["spec"]["serviceAccountName"]
    try:
        with err.status(f"waiting for the trainer pod of job {name} to start") as spinner:
            check, last_failure = watch_creation(session, name, created.metadata.uid, service_account, spinner.update)
            started = pods.wait(selector, _started_or_failed, start_timeout, on_idle=(EVENT_CHECK_SECONDS, check))
    except WaitTimedOut:
        failure = last_failure()
        states = _pod_states(session, selector)
        if failure is not None and states == "no pod yet":
            raise CliError(
                f"the trainer did not start within {start_timeout:.0f}s: no pod yet; {failure.render()}\n"
                f"job {name} stays and may still start (kubectl logs -f job/{name} -n {session.namespace}); "
                f"kubectl delete job {name} -n {session.namespace} gives up",
                EXIT_TIMEOUT,
            ) from None
        raise CliError(
            f"the trainer did not start within {start_timeout:.0f}s ({states}); kubectl describe job "
            f"{name} -n {session.namespace}",
            EXIT_TIMEOUT,
        ) from None
    try:
        return _follow_attempts(session, name, next(iter(started)), manifest["spec"]["backoffLimit"], start_timeout)
    except KeyboardInterrupt:
        err.print(f"detached; the trainer keeps running (kubectl logs -f job/{name} -n {session.namespace})")
        return EXIT_OK
    except WaitTimedOut:
        raise CliError(
            f"the next attempt of job {name} did not start ({_pod_states(session, selector)}); kubectl describe "
            f"job {name} -n {session.namespace}",
            EXIT_TIMEOUT,
        ) from None


# --- the command -------------------------------------------------------------------------------------------


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--file",
        help="submit file: TrainerSpec fields (image, cpu, memory, gpu, env, "
        "volumes, volume_mounts, lease_grace_seconds, pod_security_context, container_security_context, ...)",
    )
    parser.add_argument("--image", help="the trainer's image (AReaL, areal-workers and helm in it)")
    parser.add_argument("--name", help="the Job's name (default: trainer-<script>)")
    parser.add_argument(
        "--restarts",
        type=int,
        metavar="N",
        help="new attempts after a failed one (default 3, AReaL's recover.retries; 0: one attempt): each takes "
        "over the last one's Lease and reclaims its workers, restarted in place",
    )
    parser.add_argument(
        "--env-from-secret",
        action="append",
        default=[],
        metavar="NAME=SECRET:KEY",
        help="the trainer's variable NAME from key KEY of Secret SECRET of the namespace (repeatable): the Job holds "
        "a reference, not the value; over the submit file's env",
    )
    parser.add_argument(
        "--env-from-configmap",
        action="append",
        default=[],
        metavar="NAME=CONFIGMAP:KEY",
        help="the trainer's variable NAME from key KEY of ConfigMap CONFIGMAP of the namespace (repeatable)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the Job, its NetworkPolicy and PodMonitor instead of creating them",
    )
    parser.add_argument("--detach", action="store_true", help="return once the Job is created")
    duration_option(parser, "--start-timeout", "10m", "how long the trainer pod may take to start")
    parser.add_argument(
        "trainer_command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...", help="the trainer's command"
    )


def _run(call: Invocation) -> int:
    args = call.args
    command_line = args.trainer_command[1:] if args.trainer_command[:1] == ["--"] else args.trainer_command
    overrides = {
        "image": args.image,
        "name": args.name,
        "restarts": args.restarts,
        "env": env_references(args.env_from_secret, args.env_from_configmap),
    }
    return submit(
        call.session, args.file, overrides, command_line, args.dry_run, args.detach, args.start_timeout, call.fmt
    )


COMMANDS = (
    Command(
        "submit",
        "run the trainer as a Job in the namespace (controller ServiceAccount, the "
        "label the NetworkPolicy admits, its workers owned by its pod), stream its log and "
        "exit with its exit code",
        "  areal-workers submit -n rl -f trainer.yaml -- python train.py --config gsm8k.yaml\n"
        "  areal-workers submit --image registry.example.com/areal:v1.0.4 --dry-run -- python train.py\n"
        "  areal-workers submit -f trainer.yaml --env-from-secret WANDB_API_KEY=wandb:api-key -- python train.py",
        _run,
        _arguments,
    ),
)
