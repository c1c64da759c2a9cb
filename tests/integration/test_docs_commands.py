"""Every shell command of the README and the English docs (the Chinese pages carry the same commands: checked
here too) either runs here, against the local cluster, or is listed in NOT_RUN with the reason it cannot and what
tests the same thing instead. A command added to the docs without either fails this test.

The pages run as docs_pages.py says, one after the other. GIVEN holds what a page assumes the reader did before (a
namespace from an earlier page); what a page creates is removed after it. The deployment guide runs against the
local registry and the real node: test_deployment_guide.py.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from docs_pages import (
    BLOCK_TIMEOUT,
    POLICY_CLEANUP,
    namespaces,
    page_commands,
    remove_made_namespaces,
    run_script,
    sandbox,
    scripts,
)
from repo_paths import REPO

pytestmark = [
    pytest.mark.late,  # after the fixed_names real-node tests: the pages use the deployment guide's and demo's names
    pytest.mark.skipif(
        bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")),
        reason="the commands name the local cluster's files (.tools/kubeconfig) and its namespaces",
    ),
]

ENGLISH_PAGES = [
    "README.md",
    "charts/areal-workers/README.md",
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs" / "en").glob("*.md")),
]
CHINESE_PAGES = {
    "README.md": "docs/zh/README.md",
    **{page: page.replace("docs/en/", "docs/zh/") for page in ENGLISH_PAGES if page.startswith("docs/")},
}

# A command as written (continuation lines joined, comment removed) -> why it does not run here, and what runs it.
CI_RUNS_IT = "the README's own commands: CI runs `make test` and, in a fresh clone, `make demo` (.ci/run)"
REAL_CLUSTER = "for a real cluster (its registry, GPUs, storage)"
KEPT_DEMO = "the release `make demo DEMO_ARGS=--keep` leaves running (the demo prints these commands for it)"
NO_ENGINE = (
    "needs a container engine, which these machines have not: the same content is built without one "
    "(tools/realnode/images.py) and pulled by the real node in test_image_pulls.py"
)
STOPS_THE_CLUSTER = "stops the local cluster these tests run on; `make test` stops it at its end"
NOT_RUN = {
    "make demo": CI_RUNS_IT,
    "make test": CI_RUNS_IT,
    "make demo DEMO_ARGS=--keep": "the demo with --keep: tests/integration/test_demo.py runs the demo",
    "pip install ./": (
        "installs into the reader's environment: tests/unit/test_packaging.py builds and installs the wheel"
    ),
    "pip install -e .": "installs into the reader's environment (`make venv` does it for this checkout)",
    "pip install './[metrics]'": (
        "installs into the reader's environment: tests/unit/test_packaging.py builds and installs the wheel, and "
        "the dev extra has the metrics extra's prometheus-client"
    ),
    (
        "AREAL_K8S_METRICS_ADDRESS=127.0.0.1:9090 python -m areal_workers.launch train.py --config gsm8k_grpo.yaml "
        "scheduler.type=kubernetes"
    ): f"{REAL_CLUSTER} and an AReaL trainer: test_metrics.py serves a scheduler's metrics and scrapes them here",
    "curl -s localhost:9090/metrics | grep '^areal_workers_'": (
        "the reader's trainer: test_metrics.py fetches and parses a scheduler's endpoint"
    ),
    "pip install .": (
        "installs into the reader's environment: tests/unit/test_packaging.py builds and installs the wheel"
    ),
    (
        "python examples/bandit_demo/demo.py --kubeconfig ~/.kube/config --namespace rl-demo "
        "--image registry.example.com/areal-bandit:v1"
    ): f"{REAL_CLUSTER}: test_demo.py runs the same program here",
    "python -m areal_workers.launch train.py --config gsm8k_grpo.yaml scheduler.type=kubernetes": (
        f"{REAL_CLUSTER} and an AReaL trainer with models: test_launch_on_cluster.py runs an entry point through "
        f"the launcher here"
    ),
    "kubectl apply -n argocd -f examples/argocd-application.yaml": (
        "needs Argo CD with access to the Git repository "
        "the Application names: test_argocd.py syncs one "
        "from a local repository"
    ),
    "argocd app get areal-gsm8k": "Argo CD's own CLI, which the local cluster does not build",
    ".tools/bin/kubectl --kubeconfig .tools/kubeconfig -n bandit-demo get pods -o wide": KEPT_DEMO,
    (
        ".tools/bin/kubectl --kubeconfig .tools/kubeconfig -n bandit-demo logs "
        "aw-bandit-demo-0dfcdcae-areal-workers-actor-0"
    ): KEPT_DEMO,
    ".tools/bin/helm --kubeconfig .tools/kubeconfig -n bandit-demo history aw-bandit-demo-0dfcdcae": KEPT_DEMO,
    ".tools/bin/helm --kubeconfig .tools/kubeconfig -n bandit-demo uninstall aw-bandit-demo-0dfcdcae --wait": KEPT_DEMO,
    "make cluster-down": STOPS_THE_CLUSTER,
    "python tools/localcluster.py down": STOPS_THE_CLUSTER,
    "kubectl apply -n rl -f trainer.yaml": (
        f"{REAL_CLUSTER}: the trainer image; test_trainer_in_cluster.py runs a trainer pod here"
    ),
    "kubectl logs -n rl -f gsm8k-trainer": "follows the trainer pod above",
    "areal-workers history -n rl --experiment gsm8k-grpo --trial trial0": "the trial of the trainer above",
    "areal-workers down -n rl --experiment gsm8k-grpo --trial trial0": "the trial of the trainer above; asks first",
    (
        "areal-workers -n rl submit -f examples/trainer.yaml -- python /opt/AReaL/examples/math/gsm8k_rl.py --config "
        "/opt/AReaL/examples/math/gsm8k_grpo.yaml scheduler.type=kubernetes"
    ): f"{REAL_CLUSTER}: AReaL's trainer image; test_trainer_in_cluster.py submits a trainer here",
    "areal-workers diagnose actor -n rl --experiment gsm8k-grpo --trial trial0": (
        "a trial with a failing role: test_cli.py diagnoses one"
    ),
    "kubectl -n rl get pods -l app.kubernetes.io/instance=<release> -L areal.io/role": (
        "placeholders for the reader's release"
    ),
    "kubectl -n rl describe pod <pod>": "placeholders for the reader's pod",
    "kubectl -n rl get events --field-selector involvedObject.name=<pod>": "placeholders for the reader's pod",
    "kubectl -n rl get events --field-selector involvedObject.name=<statefulset>": "placeholders for the reader's "
    "StatefulSet; test_events.py runs it on a role's",
    "kubectl -n rl describe statefulset <statefulset>": "placeholders for the reader's StatefulSet; test_events.py "
    "runs it on a role's",
    "kubectl -n rl get events --field-selector reportingComponent=areal-workers": "the reader's namespace; "
    "test_events.py runs it in its own",
    "kubectl -n rl logs <pod> -c worker --previous": "placeholders for the reader's pod",
    "kubectl label pod gsm8k-trainer -n rl areal.io/controller=true": "the reader's trainer pod",
    (
        "kubectl get pods -n areal -l app.kubernetes.io/name=areal-workers,app.kubernetes.io/instance=demo "
        "-L areal.io/role -w"
    ): "watches until interrupted",
    "AREAL_WORKERS_HELM=.tools/bin/helm4 make test-integration": "a test lane: `make test` runs it",
    "make test-areal": "a test lane: `make test` runs it",
    (
        'AREAL_WORKERS_WORKER=areal .venv/bin/pytest -m "integration and (areal_worker or both_workers) '
        'and not serial_cluster"'
    ): "a test lane: `make test` runs it",
    "AREAL_WORKERS_KUBECONFIG=~/.kube/config make test-integration": "the tests against another cluster",
    "make release": (
        "test_registry_chart.py runs `make release REGISTRY=...` with the local cluster's registry: the same build of "
        "dist/, then the pushes"
    ),
    "make release REGISTRY=registry.example.com/areal REGISTRY_USER=ci REGISTRY_PASSWORD_FILE=token.txt": (
        "a registry outside: test_registry_chart.py builds the release and pushes it to the local cluster's registry"
    ),
    "docker build -f images/worker/Dockerfile --build-arg CODE=. -t registry.example.com/rl/areal-worker:v1 my-code/": (
        NO_ENGINE
    ),
    "docker push registry.example.com/rl/areal-worker:v1": NO_ENGINE,
    (
        "cp -r my-code dist/ && docker build -f images/trainer/Dockerfile --build-arg CODE=my-code -t "
        "registry.example.com/rl/areal-trainer:v1 dist/"
    ): NO_ENGINE,
    "kind create cluster && ct install --config ct.yaml --charts charts/areal-workers": (
        "kind needs Docker, which these machines have not"
    ),
}
# What a page assumes exists (made earlier in the docs: the quick start's namespace rl and its rbac/).
GIVEN = {
    "docs/en/rbac.md": ["kubectl create namespace rl"],
    "docs/en/security.md": ["kubectl create namespace rl"],
    "docs/en/kueue.md": ["kubectl create namespace areal"],  # the LocalQueue's (examples/kueue-queue.yaml)
    "charts/areal-workers/README.md": ["kubectl create namespace rl"],
    "docs/en/trainer-lifetime.md": ["kubectl create namespace rl"],
    "docs/en/images.md": ["kubectl create namespace rl"],
}
# Cluster-scoped objects a page makes, removed after it; after every page, the sandbox's admission policy.
CLEANUP = {"docs/en/kueue.md": ["kubectl delete --ignore-not-found -f examples/kueue-queue.yaml"]}
GUIDE = "docs/en/deployment.md"  # test_deployment_guide.py runs it


def test_the_chinese_pages_carry_the_english_commands():
    for english, chinese in CHINESE_PAGES.items():
        assert page_commands(chinese) == page_commands(english), chinese


def test_every_command_not_run_is_still_in_the_docs():
    everywhere = {command for page in ENGLISH_PAGES for command in page_commands(page)}
    assert sorted(set(NOT_RUN) - everywhere) == []


@pytest.mark.timeout(4 * BLOCK_TIMEOUT)
@pytest.mark.parametrize("page", [page for page in ENGLISH_PAGES if page != GUIDE and scripts(page, NOT_RUN)])
def test_the_pages_commands_run_on_the_local_cluster(page, kubeconfig, core, tmp_path):
    before = namespaces(core)
    environment = sandbox(tmp_path, page, kubeconfig)
    try:
        for script, stdin in [("\n".join(GIVEN.get(page, [])), None), *scripts(page, NOT_RUN)]:
            if script:
                run_script(script, stdin, tmp_path, environment, page)
    finally:
        for command in [*CLEANUP.get(page, []), POLICY_CLEANUP]:
            subprocess.run(["bash", "-c", command], cwd=tmp_path, env=environment, capture_output=True, timeout=300)
        remove_made_namespaces(core, before, page, [*GIVEN.get(page, []), *(t for t, _ in scripts(page, NOT_RUN))])
