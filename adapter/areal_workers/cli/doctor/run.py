"""Every check of `areal-workers doctor`, in order: can this identity, from this machine, run AReaL's workers here?
The namespace is checked before anything in it: one that does not exist is that one failure, with how to create it.
Each check passes, fails, warns or is skipped, with what was found and, unless it passed, what to change."""

from __future__ import annotations

import functools
from collections.abc import Callable

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ...config import KubernetesSchedulerConfig
from ...runtime import backend
from ...scheduler import KubernetesScheduler
from .admission import NAME as ADMISSION, check_admission_policy, username
from .areal_version import check_areal_version
from .chart import PROBE_ROLE, render_chart
from .check import Check, listed
from .gpus import check_gpus
from .namespace import check_namespace
from .permissions import NO_BINDING, ROLE_FILE_NAME, check_permissions
from .podsecurity import check_pod_security
from .probe import probe_worker


def check_cluster(api_client: client.ApiClient) -> Check:
    host = api_client.configuration.host
    try:
        version = client.VersionApi(api_client).get_code()
    except ApiException as error:
        return Check(
            "cluster reachable",
            "fail",
            f"{host} answered HTTP {error.status} {error.reason}",
            "check the kubeconfig's credentials (kubeconfig, context) for this cluster",
        )
    except urllib3.exceptions.HTTPError as error:
        return Check(
            "cluster reachable",
            "fail",
            f"cannot reach {host}: {error}",
            "check the kubeconfig and context, and that this machine reaches the API server",
        )
    return Check("cluster reachable", "pass", f"Kubernetes {version.git_version} at {host}")


def run_doctor(
    api_client: client.ApiClient,
    config: KubernetesSchedulerConfig,
    *,
    gpus_per_worker: int = 0,
    workers: int = 1,
    probe: bool = True,
    progress: Callable[[str], None] = lambda message: None,
) -> list[Check]:
    """Every check, in order; a check whose precondition failed is skipped with the reason. Synchronous: call it
    from a thread without a running asyncio loop."""
    progress("connecting to the cluster")
    checks = [check_cluster(api_client)]
    reachable = checks[0].status == "pass"
    gone = ""  # why the namespace cannot be used at all (does not exist, is being deleted)
    if reachable:
        progress(f"checking namespace {config.namespace}")
        namespace, missing = check_namespace(client.CoreV1Api(api_client), config.namespace)
        checks.append(namespace)
        gone = namespace.detail if missing else ""
    else:
        checks.append(Check("namespace", "skip", "the cluster is not reachable"))
    if gone:  # its fix is the namespace check's: no permission is missing in a namespace that is not there
        checks.append(Check("permissions", "skip", gone))
    elif reachable:
        progress(f"checking the permissions of {ROLE_FILE_NAME} in namespace {config.namespace}")
        user = username(client.AuthenticationV1Api(api_client))  # the identity the fixes name (kubectl auth whoami)
        permissions = check_permissions(client.AuthorizationV1Api(api_client), config.namespace, user=user)
        if permissions[0].name == NO_BINDING and checks[-1].status == "fail":
            # the namespace check's "forbidden" has the same cause: one failure, the binding's
            checks[-1] = Check("namespace", "skip", f"this identity may not read namespace {config.namespace}")
        checks += permissions
    if gone:
        checks.append(Check(ADMISSION, "skip", gone))
    elif reachable:
        progress(f"checking that the admission policy refuses this identity a token Secret in {config.namespace}")
        checks.append(
            check_admission_policy(
                client.CoreV1Api(api_client), client.AuthenticationV1Api(api_client), config.namespace
            )
        )
    else:
        checks.append(Check(ADMISSION, "skip", "the cluster is not reachable"))
    progress("rendering the chart")
    rendered, manifests = render_chart(config, gpus_per_worker, workers)
    checks.append(rendered)
    if gone:
        checks.append(Check("PodSecurity", "skip", gone))
    elif reachable:
        progress(f"reading the PodSecurity level of namespace {config.namespace}")
        checks.append(check_pod_security(client.CoreV1Api(api_client), config.namespace, manifests))
    else:
        checks.append(Check("PodSecurity", "skip", "the cluster is not reachable"))
    if gpus_per_worker <= 0:
        checks.append(Check("GPU capacity", "skip", "no GPUs asked for (gpus_per_worker=0)"))
    elif not reachable:
        checks.append(Check("GPU capacity", "skip", "the cluster is not reachable"))
    else:
        progress(f"counting nodes with {gpus_per_worker} free GPUs")
        checks.append(check_gpus(client.CoreV1Api(api_client), manifests, PROBE_ROLE, gpus_per_worker, workers))
    checks.append(check_areal_version())  # this machine's, not the cluster's: the trainer's AReaL when run beside it
    # The probe worker asks for no GPUs, so only the other failures would make it fail for a known cause (a policy
    # that is not in force lets it through).
    blockers = [
        check.name for check in checks if check.status == "fail" and check.name not in ("GPU capacity", ADMISSION)
    ]
    if not probe:
        checks.append(Check("worker reachable", "skip", "not asked for (probe=False)"))
    elif blockers:
        checks.append(
            Check(
                "worker reachable",
                "skip",
                f"not tried: {len(blockers)} check(s) above failed ({listed(blockers)})",
                "fix those first",
            )
        )
    else:
        connect = functools.partial(backend.connect, api_client=api_client)
        checks.append(
            probe_worker(
                config,
                lambda probe_config, experiment, trial: KubernetesScheduler(
                    config=probe_config, experiment_name=experiment, trial_name=trial, connect=connect
                ),
                progress=progress,
            )
        )
    return checks
