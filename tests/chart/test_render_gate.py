"""RenderGate with real helm 3: the post-renderer hands over exactly the manifests helm is about to apply, applies
them unchanged on "apply", fails helm with the verdict otherwise, and lets helm end when the scheduler goes away.
(`helm template` runs the post-renderer as `helm upgrade` does, without a cluster.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from areal_workers.release.client import MANIFEST_LOADER
from areal_workers.release.render_gate import APPLY, RenderGate
from chartlib import CHART, HELM, NAMESPACE, RELEASE, role, template_text

VALUES = ["--set", "roles.actor.replicas=2", "--set", "roles.actor.resources.gpu=8"]
HELM_ENV = {**os.environ, "KUBECONFIG": os.devnull}  # no cluster
WAIT = 60  # seconds: a helm that renders in a tenth of one, on a loaded machine


def start_template(gate: RenderGate, *values: str) -> subprocess.Popen[str]:
    command = [HELM, "template", RELEASE, str(CHART), "-n", NAMESPACE, *values, *gate.helm_flags()]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=HELM_ENV)


def kinds(manifests: list[dict]) -> list[tuple[str, str]]:
    return sorted((m["kind"], m["metadata"]["name"]) for m in manifests)


def test_the_gate_sees_what_helm_renders_and_an_apply_lets_it_through_unchanged():
    plain = template_text({"roles": {"actor": role(2, resources={"gpu": 8})}}).stdout
    hooks = {"helm.sh/hook"}
    expected = [m for m in yaml.safe_load_all(plain) if m and not hooks & set(m["metadata"].get("annotations") or {})]
    with RenderGate() as gate:
        helm = start_template(gate, *VALUES)
        seen = gate.wait_rendered(lambda: helm.poll() is not None, MANIFEST_LOADER)
        assert seen is not None and kinds(seen) == kinds(expected)  # helm 3 post-renders all but the hooks
        assert any(m["kind"] == "StatefulSet" for m in seen)
        gate.answer(APPLY)
        out, err = helm.communicate(timeout=WAIT)
    assert helm.returncode == 0, err
    applied = [m for m in yaml.safe_load_all(out) if m and not hooks & set(m["metadata"].get("annotations") or {})]
    assert kinds(applied) == kinds(expected)
    assert not gate.directory.exists()  # the render is not left behind


def test_a_refusal_fails_helm_with_the_verdict_and_prints_nothing():
    with RenderGate() as gate:
        helm = start_template(gate, *VALUES)
        assert gate.wait_rendered(lambda: helm.poll() is not None, MANIFEST_LOADER) is not None
        gate.answer("No node can hold a worker:\n0/2 nodes have nvidia.com/gpu: 16 free")
        out, err = helm.communicate(timeout=WAIT)
    assert helm.returncode != 0 and out == ""
    assert "No node can hold a worker: 0/2 nodes have nvidia.com/gpu: 16 free" in err  # one line


def test_a_helm_that_fails_before_rendering_ends_the_wait_without_manifests():
    with RenderGate() as gate:
        helm = start_template(gate, "--set", "roles.Actor!.replicas=1")  # the schema refuses the role name
        assert gate.wait_rendered(lambda: helm.poll() is not None, MANIFEST_LOADER) is None
        _, err = helm.communicate(timeout=WAIT)
    assert helm.returncode != 0 and "Actor!" in err


def test_a_scheduler_that_goes_away_without_a_verdict_fails_helm_instead_of_leaving_it_waiting():
    gate = RenderGate()
    helm = start_template(gate, *VALUES)
    assert gate.wait_rendered(lambda: helm.poll() is not None, MANIFEST_LOADER) is not None
    gate.close()  # the post-renderer's read of the verdict sees the end of the FIFO
    out, _ = helm.communicate(timeout=WAIT)
    assert helm.returncode != 0 and out == ""
    assert not Path(gate.directory).exists()
