"""The command lines of a local cluster's components: the control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler), KWOK, and podrunner."""

from __future__ import annotations

import sys
from pathlib import Path

from localkube.processes import Component
from localkube.settings import KUBELET_IP, KWOK_NODE_ANNOTATION, KWOK_STAGES, SERVICE_CIDR, Ports, binary
from repo_paths import VENV_PYTHON


def control_plane_components(state: Path, pki: Path, ports: Ports) -> list[Component]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK, in start order."""
    kubeconfigs = state / "kubeconfigs"
    etcd_url = etcd_client_url(ports)
    return [
        Component(
            "etcd",
            [
                binary("etcd"),
                "--name=local",
                f"--data-dir={state / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
                f"--initial-cluster=local=http://127.0.0.1:{ports.etcd_peer}",
                # Test clusters are thrown away: durability buys nothing and fsync costs seconds per test.
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
            state,
            health_url=f"{etcd_url}/health",
        ),
        apiserver_component(state, pki, etcd_url, "kube-apiserver", ports.apiserver),
        Component(
            "kube-controller-manager",
            [
                binary("kube-controller-manager"),
                f"--kubeconfig={kubeconfigs / 'controller-manager.yaml'}",
                f"--authentication-kubeconfig={kubeconfigs / 'controller-manager.yaml'}",
                f"--authorization-kubeconfig={kubeconfigs / 'controller-manager.yaml'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.controller_manager}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--profiling=false",
                "--v=1",
            ],
            state,
            health_url=f"https://127.0.0.1:{ports.controller_manager}/healthz",
        ),
        Component(
            "kube-scheduler",
            [
                binary("kube-scheduler"),
                f"--kubeconfig={kubeconfigs / 'scheduler.yaml'}",
                f"--authentication-kubeconfig={kubeconfigs / 'scheduler.yaml'}",
                f"--authorization-kubeconfig={kubeconfigs / 'scheduler.yaml'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.scheduler}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
            state,
            health_url=f"https://127.0.0.1:{ports.scheduler}/healthz",
        ),
        Component(
            "kwok",
            [
                binary("kwok"),
                f"--kubeconfig={kubeconfigs / 'kwok.yaml'}",
                f"--config={KWOK_STAGES}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--node-ip={KUBELET_IP}",
                "--cidr=127.21.0.0/16",
                f"--server-address={KUBELET_IP}:{ports.kwok}",
                "--node-lease-duration-seconds=40",
                f"--tls-cert-file={pki / 'kubelet.crt'}",
                f"--tls-private-key-file={pki / 'kubelet.key'}",
                # Logs objects map a pod's containers to log files (podrunner writes them).
                "--enable-crds=Logs",
            ],
            state,
            health_url=f"http://{KUBELET_IP}:{ports.kwok}/healthz",
        ),
    ]


def etcd_client_url(ports: Ports) -> str:
    return f"http://127.0.0.1:{ports.etcd_client}"


def apiserver_component(state: Path, pki: Path, etcd_url: str, name: str, port: int) -> Component:
    """A kube-apiserver on etcd `etcd_url` serving on 127.0.0.1:`port`. The cluster's own is "kube-apiserver"; a
    second one on the same etcd (LocalCluster.second_apiserver) serves the same cluster, as in a highly available
    control plane, and may be stopped without stopping the API for anyone else."""
    return Component(
        name,
        [
            binary("kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,PodSecurity,LimitRanger,"
            "ResourceQuota,DefaultStorageClass,DefaultTolerationSeconds,NodeRestriction,Priority",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # The Endpoints of the `kubernetes` Service would carry a loopback IP, which validation rejects.
            "--endpoint-reconciler-type=none",
            # Container logs come from KWOK's kubelet API on the nodes' InternalIP, over verified TLS.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
        ],
        state,
        health_url=f"https://127.0.0.1:{port}/readyz",
    )


def podrunner_component(state: Path, ports: Ports, pod_logs: Path, workers: str = "reference") -> Component:
    """The kubelets' process side: one runner for every namespace not labelled private (tools/podrunner/), run as
    `python -m podrunner` by an interpreter with tools/ on its path (the virtualenv's: `make venv`)."""
    python = VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable)
    return Component(
        "podrunner",
        [
            str(python),
            "-m",
            "podrunner",
            f"--kubeconfig={state / 'kubeconfigs' / 'kwok.yaml'}",
            f"--log-dir={pod_logs}",
            f"--workers={workers}",
            f"--ledger={state / 'podrunner'}",
            f"--health=127.0.0.1:{ports.podrunner}",
        ],
        state,
        health_url=f"http://127.0.0.1:{ports.podrunner}/healthz",
        grace=30.0,
    )
