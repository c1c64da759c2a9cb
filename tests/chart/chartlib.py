"""Helpers for the chart tests: run helm on charts/areal-workers and parse what it renders.

Test modules import this module by name; conftest.py exposes `render` as a fixture. (Several
conftest.py files exist under tests/, so `import conftest` would be ambiguous.)"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from repo_paths import REPO, TOOLS_BIN

CHART = REPO / "charts" / "areal-workers"
HELM = os.environ.get("HELM") or os.environ.get("AREAL_WORKERS_HELM") or str(TOOLS_BIN / "helm")
HELM4 = os.environ.get("HELM4", str(TOOLS_BIN / "helm4"))
RELEASE = "rel"
NAMESPACE = "ns"

# Helm must never reach a cluster from these tests.
_ENV = {**os.environ, "KUBECONFIG": os.devnull}


def run_helm(*args: str, helm: str = HELM, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, env=_ENV, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def template_text(
    values: dict | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    helm: str = HELM,
    chart: Path = CHART,
    extra: tuple[str, ...] = (),
    check: bool = True,
) -> subprocess.CompletedProcess:
    """`helm template` with `values` written to a values file."""
    # JSON is YAML that no YAML 1.1 parser can misread (PyYAML would write the string "y" bare; helm reads it as true).
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        json.dump(values or {}, fh)
        path = fh.name
    try:
        return run_helm("template", release, str(chart), "-n", namespace, "-f", path, *extra, helm=helm, check=check)
    finally:
        os.unlink(path)


# Every optional feature at once (offload, RDMA, hostNetwork, forks, "$" in values, the reaper), for render-wide checks.
FULL_VALUES = {
    "roles": {
        "actor": {
            "replicas": 2,
            "resources": {"gpu": 8},
            "rdma": {"enabled": True},
            "hostNetwork": True,
            "setupCommands": ["true"],
            "offload": {"enabled": True},
            "extraArgs": ["--x", "$(POD_NAME)"],
        },
        "rollout": {
            "replicas": 3,
            "env": {"X": "1"},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
        },
    },
    "colocations": {"critic": "actor"},
    "forks": {"ref": {"target": "actor"}, "helper": {"target": "rollout", "mode": "pod"}},
    "controllerRbac": {"create": True},
    "cluster": {"fileroot": "/data/$x", "nameResolve": {"type": "etcd3", "etcd3Addr": "etcd:2379"}},
    "ownerReferences": [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "trainer",
            "uid": "5c1e7a2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ],
    "reaper": {"enabled": True, "image": {"repository": "registry.example.com/areal-workers", "tag": "v0.1.0"}},
}


_cache: dict[str, list[dict]] = {}


def render(values: dict | None = None, **kwargs) -> list[dict]:
    """Render the chart with `values` and return every document (tests hooks included)."""
    key = json.dumps([values, sorted(kwargs.items())], sort_keys=True, default=str)
    if key not in _cache:
        out = template_text(values, **kwargs).stdout
        _cache[key] = [d for d in yaml.safe_load_all(out) if d]
    return json.loads(json.dumps(_cache[key]))  # a private copy per caller


def render_error(values: dict, **kwargs) -> str:
    """Render `values` expecting helm to fail; return its stderr."""
    proc = template_text(values, check=False, **kwargs)
    assert proc.returncode != 0, f"helm accepted {values}"
    return proc.stderr


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def sts(docs: list[dict], role: str) -> dict:
    """The StatefulSet of an AReaL role (matched by its areal.io/role label)."""
    found = [d for d in find(docs, "StatefulSet") if d["metadata"]["labels"]["areal.io/role"] == role]
    assert len(found) == 1, f"no single StatefulSet for role {role}"
    return found[0]


def container(statefulset: dict) -> dict:
    return statefulset["spec"]["template"]["spec"]["containers"][0]


def env_of(statefulset: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(statefulset)["env"]}


def role(replicas: int = 1, **settings) -> dict:
    return {"replicas": replicas, **settings}


def docs_by_identity(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def kubelet_expand(text: str, env: dict[str, str] | None = None) -> str:
    """What the kubelet makes of `text` in command, args or an env value (k8s third_party/forked/golang/expansion):
    "$$" is a literal "$", "$(NAME)" is NAME's value if NAME is in `env`, else left as written."""
    env = env or {}
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else f"$({name})")
                    i = end + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def pod_env(statefulset: dict, downward: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment as the kubelet builds it: each entry expanded with the ones before it.
    `downward` gives fieldRef values by fieldPath; other valueFrom entries are left out."""
    env: dict[str, str] = {}
    for entry in container(statefulset)["env"]:
        if "value" in entry:
            env[entry["name"]] = kubelet_expand(entry["value"], env)
        elif (
            "fieldRef" in entry.get("valueFrom", {})
            and downward
            and entry["valueFrom"]["fieldRef"]["fieldPath"] in downward
        ):
            env[entry["name"]] = downward[entry["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


POD_INDEX = "metadata.labels['apps.kubernetes.io/pod-index']"
