"""The local cluster's identities: its CA and certificates (made with openssl), and kubeconfigs for them or for
a ServiceAccount's token."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import yaml

from localkube.settings import KUBELET_IP, KUBERNETES_SERVICE_IP, ClusterError, binary
from realnode.config import NODE_IP


def _openssl(pki: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=pki)


# NODE_IP: the real node's pods reach the API server through a relay on the bridge address (realnode/relay.py).
APISERVER_SANS = (
    f"IP:127.0.0.1,IP:{KUBERNETES_SERVICE_IP},IP:{NODE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
    "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
)


def issue_cert(pki: Path, name: str, subject: str, *, sans: str | None = None) -> None:
    """A key and a certificate signed by the cluster CA: a serving certificate for `sans`, else a client one."""
    ext = pki / f"{name}.ext"
    if sans:
        ext.write_text(
            f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
        )
    else:
        ext.write_text("extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
    _openssl(
        pki,
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-subj",
        subject,
        "-out",
        f"{name}.csr",
    )
    _openssl(
        pki,
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "365",
        "-extfile",
        ext.name,
        "-out",
        f"{name}.crt",
    )


def ensure_pki(pki: Path) -> None:
    """The cluster CA, the certificates of every component and the ServiceAccount signing key, made once."""
    if (pki / "done").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    _openssl(
        pki,
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "365",
        "-subj",
        "/CN=areal-workers-local-ca",
    )
    issue_cert(pki, "apiserver", "/CN=kube-apiserver", sans=APISERVER_SANS)
    issue_cert(pki, "kubelet", "/CN=kwok-kubelet", sans=f"IP:{KUBELET_IP}")
    issue_cert(pki, "admin", "/O=system:masters/CN=areal-workers-admin")
    issue_cert(pki, "controller-manager", "/CN=system:kube-controller-manager")
    issue_cert(pki, "scheduler", "/CN=system:kube-scheduler")
    # KWOK updates status of nodes and pods it does not own: it acts as every fake kubelet at once. podrunner,
    # the kubelets' other half, uses the same identity.
    issue_cert(pki, "kwok", "/O=system:masters/CN=kwok-controller")
    _openssl(pki, "genrsa", "-out", "sa.key", "2048")
    _openssl(pki, "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    (pki / "done").write_text("")


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _kubeconfig(ca: Path, user: str, credentials: dict, server: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "areal-workers-local", "cluster": {"server": server, "certificate-authority-data": _b64(ca)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [
            {"name": f"{user}@areal-workers-local", "context": {"cluster": "areal-workers-local", "user": user}}
        ],
        "current-context": f"{user}@areal-workers-local",
    }


def cert_kubeconfig(pki: Path, cert: str, path: Path, server: str) -> Path:
    """A kubeconfig at `path` that authenticates with the client certificate `cert` of `pki`."""
    credentials = {"client-certificate-data": _b64(pki / f"{cert}.crt"), "client-key-data": _b64(pki / f"{cert}.key")}
    path.write_text(yaml.safe_dump(_kubeconfig(pki / "ca.crt", cert, credentials, server)))
    path.chmod(0o600)
    return path


def service_account_kubeconfig(
    admin_kubeconfig: Path, namespace: str, service_account: str, out: Path, duration: str = "24h"
) -> Path:
    """A kubeconfig for any cluster that authenticates as the ServiceAccount with a TokenRequest token."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    context_name = admin["current-context"]
    context = next(c["context"] for c in admin["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"])
    result = subprocess.run(
        [
            binary("kubectl"),
            f"--kubeconfig={admin_kubeconfig}",
            "create",
            "token",
            service_account,
            "-n",
            namespace,
            f"--duration={duration}",
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ClusterError(f"cannot mint a token for {namespace}/{service_account}: {result.stderr.strip()}")
    user = f"{namespace}-{service_account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": result.stdout.strip()}}],
        "contexts": [{"name": user, "context": {"cluster": "cluster", "user": user, "namespace": namespace}}],
        "current-context": user,
    }
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out
