"""Helm values that run a role's pods on the real node: the locally built image (never pulled), the node's label and
taint, and AReaL's environment mounted read-only from the host (images.py says why it is not in the image); and a
submit file that runs the trainer there (`areal-workers submit -f`)."""

from __future__ import annotations

from pathlib import Path

from realnode.config import NODE_LABEL, NODE_TAINT
from realnode.images import WORKER_IMAGE
from repo_paths import REPO, TOOLS_BIN

# Where the trainer pod finds helm (the image's PATH has it) and this checkout's package (on its PYTHONPATH).
TRAINER_HELM = "/usr/local/bin/helm"
TRAINER_PACKAGE = REPO / "adapter"
TRAINER_CHART = REPO / "charts" / "areal-workers"
TRAINER_RBAC = REPO / "rbac"  # the package's rbac/ is a link to it: the rules a recorded revision's Roles may hold


def interpreter_home(environment: Path) -> Path:
    """The installation the virtualenv's python links to (pyvenv.cfg `home` is its bin/)."""
    for line in (environment / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip()).parent
    raise ValueError(f"{environment}/pyvenv.cfg has no `home`: not a virtualenv")


def placement() -> dict:
    """nodeSelector and tolerations for the real node."""
    return {
        "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
        "tolerations": [{"key": NODE_TAINT[0], "operator": "Equal", "value": NODE_TAINT[1], "effect": NODE_TAINT[2]}],
    }


def host_mounts(paths: dict[str, Path], read_only: bool) -> tuple[list[dict], list[dict]]:
    """(volumes, volumeMounts) for host directories mounted at their own paths."""
    volumes = [{"name": name, "hostPath": {"path": str(path), "type": "Directory"}} for name, path in paths.items()]
    mounts = [{"name": name, "mountPath": str(path), "readOnly": read_only} for name, path in paths.items()]
    return volumes, mounts


def worker_values(environment: Path, shared: Path | None = None) -> dict:
    """Values for the whole release; `shared` (e.g. the trial's --fileroot) is mounted read-write so that the
    controller on the host and the workers see the same files, as AReaL's NFS name_resolve expects."""
    environment = environment.resolve()
    volumes, mounts = host_mounts({"areal-env": environment, "areal-python": interpreter_home(environment)}, True)
    if shared is not None:
        shared_volumes, shared_mounts = host_mounts({"areal-shared": shared}, False)
        volumes, mounts = volumes + shared_volumes, mounts + shared_mounts
    repository, tag = WORKER_IMAGE.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "workerDefaults": {**placement(), "extraVolumes": volumes, "extraVolumeMounts": mounts},
        "tests": placement(),
    }


def trainer_submit(environment: Path, api_host: str, api_port: int) -> dict:
    """A submit file (TrainerSpec fields) whose trainer runs on the real node: the worker image with AReaL's
    environment mounted as the workers have it, this checkout's package and helm mounted read-only, and the API server
    at the node's relay. Pods find the API server at KUBERNETES_SERVICE_HOST, which the kubelet sets to the
    `kubernetes` Service's ClusterIP: a loopback address here, the pod's own loopback inside its network namespace,
    so the file names the relay instead (realnode/relay.py)."""
    environment = environment.resolve()
    volumes, mounts = host_mounts(
        {
            "areal-env": environment,
            "areal-python": interpreter_home(environment),
            "areal-workers": TRAINER_PACKAGE,
            "areal-workers-chart": TRAINER_CHART,  # the package's chart/ is a link to it in a checkout
            "areal-workers-rbac": TRAINER_RBAC,
        },
        True,
    )
    volumes.append({"name": "helm", "hostPath": {"path": str((TOOLS_BIN / "helm").resolve()), "type": "File"}})
    mounts.append({"name": "helm", "mountPath": TRAINER_HELM, "readOnly": True})
    place = placement()
    return {
        "image": WORKER_IMAGE,
        "node_selector": place["nodeSelector"],
        "tolerations": place["tolerations"],
        "volumes": volumes,
        "volume_mounts": mounts,
        "env": {
            "KUBERNETES_SERVICE_HOST": api_host,
            "KUBERNETES_SERVICE_PORT": str(api_port),
            "PYTHONPATH": str(TRAINER_PACKAGE),
        },
    }
