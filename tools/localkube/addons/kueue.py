"""Kueue on the local cluster (`localcluster.py up --kueue`): its controller manager as a local process on 127.0.0.1,
its CRDs, and its admission webhooks reached by the apiserver at a URL.

Kueue's webhooks fail closed: while their configurations exist and Kueue does not answer, the apiserver refuses pods
and StatefulSets in the namespaces they select. So they select only namespaces labelled MANAGED_NAMESPACE_LABEL (the
tests label theirs; every other namespace never sees them), they are installed only once Kueue answers, and `down`
deletes them before it stops Kueue.

Without its internal certificate management, Kueue reads its metrics certificate from a fixed path,
/etc/kueue/metrics/certs. The process runs in a mount namespace of its own in which /etc is an overlay whose upper
layer (in the cluster's state directory) holds that certificate: the host's /etc is never written, and the overlay
ends with the process.
"""

from __future__ import annotations

import base64
import copy
import shlex
import time
from pathlib import Path
from typing import Any

import yaml

import localkube.processes as processes
from localkube.addons import Cluster
from localkube.pki import issue_cert
from localkube.processes import Component, say
from localkube.settings import ClusterError, Ports, binary
from repo_paths import REPO, TOOLS_BIN

KUEUE_CONFIG = REPO / ".tools" / "etc" / "kueue"
MANAGED_NAMESPACE_LABEL = "areal-workers.local/kueue"
WEBHOOK_CONFIGURATIONS = (
    ("MutatingWebhookConfiguration", "areal-workers-kueue-mutating"),
    ("ValidatingWebhookConfiguration", "areal-workers-kueue-validating"),
)
# The workload kinds Kueue manages here: a role's StatefulSet and the pods it creates.
FRAMEWORKS = ("pod", "statefulset")
FRAMEWORK_RESOURCES = {"pods", "statefulsets"}
METRICS_CERT_DIR = "etc/kueue/metrics/certs"  # below /etc's overlay upper layer


def kueue_dir(state: Path) -> Path:
    return state / "kueue"


def configuration(ports: Ports, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration: everything on 127.0.0.1, no leader election, no certificate management of its own, only
    the labelled namespaces managed, and the visibility server off (it binds 0.0.0.0)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.kueue_health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.kueue_metrics}"},
        "webhook": {"host": "127.0.0.1", "port": ports.kueue_webhook, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "featureGates": {"VisibilityOnDemand": False},
        "clientConnection": {"qps": 50, "burst": 100},
    }


def webhook_configurations(manifests: list[dict[str, Any]], url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations for a process at `url`: only the webhooks of Kueue's own kinds and of
    FRAMEWORKS, each called at `url` + its path with `ca_bundle`; the framework webhooks select only labelled
    namespaces."""
    names = dict(WEBHOOK_CONFIGURATIONS)
    result = []
    for manifest in manifests:
        if manifest.get("kind") not in names:
            continue
        configuration = copy.deepcopy(manifest)
        configuration["metadata"] = {
            "name": names[manifest["kind"]],
            "labels": {"app.kubernetes.io/part-of": "areal-workers-local-cluster"},
        }
        kept = []
        for webhook in configuration["webhooks"]:
            resources = {r for rule in webhook.get("rules", []) for r in rule.get("resources", [])}
            groups = {g for rule in webhook.get("rules", []) for g in rule.get("apiGroups", [])}
            framework = bool(resources & FRAMEWORK_RESOURCES)
            if not framework and groups != {"kueue.x-k8s.io"}:
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca_bundle}
            if framework:
                webhook["namespaceSelector"] = {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}}
            kept.append(webhook)
        configuration["webhooks"] = kept
        result.append(configuration)
    return result


def prepare(state: Path, pki: Path, ports: Ports) -> Path:
    """The files Kueue's process reads: serving and metrics certificates, its Configuration. Returns the config path."""
    home = kueue_dir(state)
    certs = home / "webhook-certs"
    metrics = home / "etc-upper" / METRICS_CERT_DIR
    for directory in (certs, metrics, home / "etc-work"):
        directory.mkdir(parents=True, exist_ok=True)
    if not (pki / "kueue.crt").exists():
        issue_cert(pki, "kueue", "/CN=kueue-webhook", sans="IP:127.0.0.1")
    for target in (certs, metrics):
        (target / "tls.crt").write_bytes((pki / "kueue.crt").read_bytes())
        (target / "tls.key").write_bytes((pki / "kueue.key").read_bytes())
        (target / "tls.key").chmod(0o600)
    config = home / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(ports, certs), sort_keys=False))
    return config


def component(state: Path, ports: Ports, kubeconfig: Path) -> Component:
    """Kueue's controller manager, in a mount namespace of its own with /etc overlaid (see the module docstring)."""
    home = kueue_dir(state)
    overlay = f"lowerdir=/etc,upperdir={home / 'etc-upper' / 'etc'},workdir={home / 'etc-work'}"
    # Not binary(): stopping and status build this too, also where `make tools` never built Kueue.
    kueue = [
        str(TOOLS_BIN / "kueue"),
        f"--config={home / 'config.yaml'}",
        f"--kubeconfig={kubeconfig}",
        "--zap-log-level=2",
    ]
    script = f"mount -t overlay overlay -o {shlex.quote(overlay)} /etc && exec {shlex.join(kueue)}"
    return Component(
        "kueue",
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script],
        state,
        health_url=f"http://127.0.0.1:{ports.kueue_health}/readyz",
    )


def crd_files() -> list[Path]:
    return sorted((KUEUE_CONFIG / "crd").glob("kueue.x-k8s.io_*.yaml"))


def webhook_manifests() -> list[dict[str, Any]]:
    path = KUEUE_CONFIG / "webhook" / "manifests.yaml"
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def ensure(cluster: Cluster, deadline: float) -> None:
    """Kueue's CRDs, its process, then its webhook configurations (only once it answers: they fail closed)."""
    kueue = component(cluster.state, cluster.ports, cluster.kubeconfig)
    if kueue.pid() is not None and cluster.healthy(kueue):
        say("kueue already running")
        return
    processes.stop([kueue])
    binary("kueue")  # a clear error when `make tools` did not build it
    crds = crd_files()
    if not crds:
        raise ClusterError(f"no Kueue CRDs in {KUEUE_CONFIG}: run `make tools`")
    started = time.monotonic()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *(f"--filename={crd}" for crd in crds))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(f"crd/{yaml.safe_load(crd.read_text())['metadata']['name']}" for crd in crds),
    )
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}),
    )
    prepare(cluster.state, cluster.pki, cluster.ports)
    processes.start(kueue)
    cluster.wait_healthy(kueue, deadline)
    ca_bundle = base64.b64encode((cluster.pki / "ca.crt").read_bytes()).decode()
    configurations = webhook_configurations(
        webhook_manifests(), f"https://127.0.0.1:{cluster.ports.kueue_webhook}", ca_bundle
    )
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(configurations))
    say(
        f"kueue ready ({time.monotonic() - started:.1f}s; its webhooks act in namespaces labelled "
        f"{MANAGED_NAMESPACE_LABEL}=true)"
    )


def stop(cluster: Cluster) -> None:
    """Its webhook configurations go first: with them and without Kueue, labelled namespaces refuse pods."""
    kueue = component(cluster.state, cluster.ports, cluster.kubeconfig)
    if kueue.pid() is None:
        return
    if cluster.apiserver_healthy():
        for kind, name in WEBHOOK_CONFIGURATIONS:
            cluster.kubectl("delete", kind.lower(), name, "--ignore-not-found")
    processes.stop([kueue])
