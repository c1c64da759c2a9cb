"""An upgrade that changes nothing writes nothing. Helm 3 patches an object when its three-way merge of the previous
manifest, the new one and the live object finds a difference; a field the chart renders but the API server leaves
out of what it stores (a 0 that is the API's default) is such a difference on every revision: one needless write per
StatefulSet, through admission, for each create_workers, scale or fork of a trial. One exception is Kubernetes':
a PodDisruptionBudget's selector has the patch strategy "replace", so every strategic merge patch carries it whole
(`kubectl apply` of an unchanged budget sends it too). Helm 3 explicitly, in every lane: helm 4 applies server-side,
where the merge is the server's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from repo_paths import REPO, TOOLS_BIN

CHART = REPO / "charts" / "areal-workers"
HELM3 = str(TOOLS_BIN / "helm")
# Every probe on, each at the API's default delay: what the server leaves out of the stored object.
PROBES = {kind: {"enabled": True, "initialDelaySeconds": 0} for kind in ("readiness", "liveness", "startup")}
VALUES = {
    "experiment": "exp",
    "trial": "t0",
    "workerDefaults": {"probes": PROBES},
    "roles": {"actor": {"replicas": 2}, "rollout": {"replicas": 1}},
}


def upgrade(kubeconfig: Path, namespace: str, values: Path) -> str:
    """`helm upgrade --install --debug` of the chart: its log (stderr), where helm names each object it patched."""
    result = subprocess.run(
        [HELM3, "--kubeconfig", str(kubeconfig), "upgrade", "--install", "noop", str(CHART), "-n", namespace]
        + ["-f", str(values), "--debug"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def test_an_upgrade_with_the_same_values_patches_no_object(kubeconfig, namespace, tmp_path):
    values = tmp_path / "values.json"
    values.write_text(json.dumps(VALUES))
    upgrade(kubeconfig, namespace, values)
    log = upgrade(kubeconfig, namespace, values)
    patched = [line for line in log.splitlines() if "Patch " in line and "Patch PodDisruptionBudget" not in line]
    assert not patched, "\n".join(patched)
    unchanged = [line for line in log.splitlines() if "no changes for StatefulSet" in line]
    assert len(unchanged) == 2, log[-3000:]  # helm compared both StatefulSets and found nothing to send
