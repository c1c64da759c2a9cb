"""What a pod's process gets from podrunner besides its container's env: its ServiceAccount's credentials as a
kubeconfig, the apiserver's address, and the host's environment without the host's own cluster access.

A kubelet mounts a token of the pod's ServiceAccount at /var/run/secrets/kubernetes.io/serviceaccount when the
ServiceAccount admission plugin has put that volume into the pod (neither the pod nor its ServiceAccount sets
automountServiceAccountToken: false), and sets KUBERNETES_SERVICE_HOST/PORT. podrunner runs the pods of many
namespaces as processes of one host and must not write into the host's /var/run/secrets. So, for a container with
that mount, it requests the token the kubelet would (TokenRequest API: the pod's ServiceAccount, bound to the pod,
with the projected volume's expirationSeconds and audience) and writes a kubeconfig with the apiserver's URL and
CA (from podrunner's own kubeconfig), that token and the pod's namespace as the context's namespace into a
directory of the pod's own; the process gets KUBECONFIG=<that file>. The directory goes when the pod's process is
gone (the pod deleted, the runner stopping).

KUBERNETES_SERVICE_HOST/PORT name the apiserver podrunner talks to. The kubernetes Python client's
load_incluster_config() then finds no token file at the fixed path and raises ConfigException ("Service token file
does not exist."); clients that fall back to load_kube_config() on it (the adapter's kube_client does) read
KUBECONFIG, as helm and kubectl do. On a host that has a token file there itself (podrunner running inside a pod of
another cluster), load_incluster_config() would succeed with the host's token and CA against this apiserver, so the
variables are left out there: the loader raises ConfigException for the missing host/port, with the same fallback.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from podrunner.pods import ManagedPod, UnsupportedPod
from repo_paths import TOOLS_BIN

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
HOST_TOKEN = Path(SERVICE_ACCOUNT_DIR) / "token"
DEFAULT_TOKEN_SECONDS = 3607  # the admission plugin's volume asks for this; the apiserver extends pod-bound ones
# The host's access to a cluster, which a pod must not inherit: its kubeconfig and the in-cluster variables
# (KUBERNETES_SERVICE_HOST, ..._PORT, ..._PORT_HTTPS, KUBERNETES_PORT, KUBERNETES_PORT_443_TCP_*).
HOST_ACCESS_VARIABLES = ("KUBECONFIG",)
HOST_ACCESS_PREFIXES = ("KUBERNETES_SERVICE_", "KUBERNETES_PORT")
# The host's login, which a container does not inherit: getpass.getuser() reads these before the uid's passwd
# entry, and AReaL keys its name_resolve records by it (a pod's user is its image's or its env's USER).
HOST_LOGIN_VARIABLES = ("LOGNAME", "USER", "LNAME", "USERNAME")

log = logging.getLogger("podrunner")


def tools_directory() -> Path | None:
    """The directory of the helm (and kubectl) podrunner's repository installed (`make tools`), if any."""
    return TOOLS_BIN if os.access(TOOLS_BIN / "helm", os.X_OK) else None


def host_environment(tools: Path | None) -> dict[str, str]:
    """podrunner's environment as the base of a pod's: without the host's cluster access, and with `tools` first
    on PATH, as an image that ships helm and kubectl would have them (a container env entry PATH replaces it)."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in (*HOST_ACCESS_VARIABLES, *HOST_LOGIN_VARIABLES) and not name.startswith(HOST_ACCESS_PREFIXES)
    }
    if tools is not None:
        environment["PATH"] = os.pathsep.join(filter(None, [str(tools), environment.get("PATH")]))
    return environment


@dataclass(frozen=True)
class TokenMount:
    """The ServiceAccount token volume the admission plugin put into a pod's container."""

    service_account: str
    expiration_seconds: int
    audience: str | None


def token_mount(pod: client.V1Pod) -> TokenMount | None:
    """The first container's ServiceAccount token mount, None when it has none (automountServiceAccountToken
    false on the pod or its ServiceAccount). A volume of another kind at that path is not emulated."""
    container = pod.spec.containers[0]
    mount = next((m for m in container.volume_mounts or [] if m.mount_path.rstrip("/") == SERVICE_ACCOUNT_DIR), None)
    if mount is None:
        return None
    volume = next((v for v in pod.spec.volumes or [] if v.name == mount.name), None)
    sources = volume.projected.sources or [] if volume is not None and volume.projected is not None else []
    token = next((s.service_account_token for s in sources if s.service_account_token is not None), None)
    if token is None:
        raise UnsupportedPod(
            f"volume {mount.name!r} at {SERVICE_ACCOUNT_DIR} is not a projected "
            "serviceAccountToken: not emulated by podrunner"
        )
    return TokenMount(
        pod.spec.service_account_name or "default",
        token.expiration_seconds or DEFAULT_TOKEN_SECONDS,
        token.audience or None,
    )


@dataclass(frozen=True)
class ApiServer:
    """How podrunner reaches the apiserver (from its own kubeconfig), handed on to the pods."""

    url: str
    certificate_authority_data: str | None
    insecure: bool
    tls_server_name: str | None

    @classmethod
    def of(cls, configuration: client.Configuration) -> ApiServer:
        ca = configuration.ssl_ca_cert  # a file: the client writes certificate-authority-data into one
        return cls(
            url=configuration.host,
            certificate_authority_data=base64.b64encode(Path(ca).read_bytes()).decode() if ca else None,
            insecure=not configuration.verify_ssl,
            tls_server_name=getattr(configuration, "tls_server_name", None),
        )

    def cluster(self) -> dict[str, object]:
        entry: dict[str, object] = {"server": self.url}
        if self.certificate_authority_data:
            entry["certificate-authority-data"] = self.certificate_authority_data
        if self.insecure:
            entry["insecure-skip-tls-verify"] = True
        if self.tls_server_name:
            entry["tls-server-name"] = self.tls_server_name
        return entry

    def service_variables(self) -> dict[str, str]:
        """KUBERNETES_SERVICE_HOST/PORT as a kubelet sets them, for this apiserver."""
        address = urlsplit(self.url)
        return {"KUBERNETES_SERVICE_HOST": address.hostname or "", "KUBERNETES_SERVICE_PORT": str(address.port or 443)}


def pod_kubeconfig(server: ApiServer, namespace: str, service_account: str, token: str) -> dict:
    user = f"system:serviceaccount:{namespace}:{service_account}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": server.cluster()}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "serviceaccount", "context": {"cluster": "cluster", "user": user, "namespace": namespace}}
        ],
        "current-context": "serviceaccount",
    }


def remove_credentials(directory: Path | None) -> None:
    """Removes a pod's credentials directory; one already gone is no error."""
    if directory is None:
        return
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        pass


class PodCredentials:
    """Issues the kubeconfigs of a runner's pods, each in `directory`/<namespace>_<pod>_<uid prefix>/kubeconfig."""

    def __init__(self, api: client.CoreV1Api, directory: Path) -> None:
        self.api = api
        self.directory = directory
        self.server = ApiServer.of(api.api_client.configuration)
        self.service_variables = not HOST_TOKEN.exists()
        if not self.service_variables:
            log.warning(
                "%s exists on this host: pods get KUBECONFIG but no KUBERNETES_SERVICE_HOST/PORT, so that "
                "load_incluster_config() does not pick up the host's token",
                HOST_TOKEN,
            )

    def reset(self) -> None:
        """Removes what an earlier runner with the same directory left (its processes are gone: their ledger)."""
        remove_credentials(self.directory)

    def attach(self, pod: client.V1Pod, managed: ManagedPod) -> None:
        """Writes the pod's kubeconfig when its container mounts a ServiceAccount token, and sets the variables
        the process gets (managed.kubelet_env). A TokenRequest refused with 403 (a namespace terminating) is
        raised as is; other refusals become UnsupportedPod (the kubelet's config error)."""
        mount = token_mount(pod)
        if mount is None:
            return
        token = self._request(pod, mount)
        directory = self.directory / managed.log.stem
        path = _write_private(
            directory / "kubeconfig",
            yaml.safe_dump(pod_kubeconfig(self.server, pod.metadata.namespace, mount.service_account, token)),
        )
        managed.credentials = directory
        managed.kubelet_env = {
            **(self.server.service_variables() if self.service_variables else {}),
            "KUBECONFIG": str(path),
        }

    def _request(self, pod: client.V1Pod, mount: TokenMount) -> str:
        body = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[mount.audience] if mount.audience else [],  # empty: the apiserver's own
                expiration_seconds=mount.expiration_seconds,
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid
                ),
            )
        )
        try:
            answer = self.api.create_namespaced_service_account_token(
                mount.service_account, pod.metadata.namespace, body
            )
        except ApiException as error:
            if error.status == 403:
                raise
            raise UnsupportedPod(
                f"token of ServiceAccount {pod.metadata.namespace}/{mount.service_account}: "
                f"{error.status} {error.reason}"
            ) from error
        return answer.status.token


def _write_private(path: Path, text: str) -> Path:
    """Writes `path` readable by this user only, in a directory of its own (replaced whole if it exists)."""
    path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.replace(partial, path)
    return path
