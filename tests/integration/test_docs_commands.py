"""Every shell command of the README and the English docs (the Chinese pages carry the same commands: checked
here too) either runs here, against the local cluster, or is listed in NOT_RUN with the reason it cannot and what
tests the same thing instead. A command added to the docs without either fails this test.

A page's ```bash blocks run in order, each as one `bash -e` script, in a directory that holds the checkout (links)
and the files the page shows (a ```yaml block whose first line is `# values: FILE, ...` is written to FILE), with
.tools/bin and .venv/bin on PATH and a copy of the local cluster's admin kubeconfig as KUBECONFIG. A line
`.venv/bin/python` reads the page's next ```python block. GIVEN holds what a page assumes the reader did before
(a namespace from an earlier page); what a page creates is removed after it. The sandbox's
rbac/admission-policy.yaml is bound to the docs' namespace alone (sandbox()).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from localkube.rbac import POLICY_FILE, scoped_policy
from repo_paths import REPO

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")),
    reason="the commands name the local cluster's files (.tools/kubeconfig) and its namespaces",
)

ENGLISH_PAGES = [
    "README.md",
    "charts/areal-workers/README.md",
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs" / "en").glob("*.md")),
]
CHINESE_PAGES = {
    "README.md": "docs/zh/README.md",
    **{page: page.replace("docs/en/", "docs/zh/") for page in ENGLISH_PAGES if page.startswith("docs/")},
}
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FILE_HEADER = re.compile(r"^# values: (\S+?),")
BLOCK_TIMEOUT = 900

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
    "pip install .": (
        "installs into the reader's environment: tests/unit/test_packaging.py builds and installs the wheel"
    ),
    (
        "python examples/bandit_demo.py --kubeconfig ~/.kube/config --namespace rl-demo "
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
    "kubectl -n rl logs <pod> -c worker --previous": "placeholders for the reader's pod",
    "kubectl label pod gsm8k-trainer -n rl areal.io/controller=true": "the reader's trainer pod",
    (
        "kubectl get pods -n areal -l app.kubernetes.io/name=areal-workers,app.kubernetes.io/instance=demo "
        "-L areal.io/role -w"
    ): "watches until interrupted",
    "AREAL_WORKERS_HELM=.tools/bin/helm4 make test-integration": "a test lane: `make test` runs it",
    "make test-areal": "a test lane: `make test` runs it",
    (
        "AREAL_WORKERS_WORKER=areal .venv/bin/pytest tests/integration/test_scheduler.py "
        'tests/integration/test_areal_worker.py -m "not reference_guard_only" -k "not rbac"'
    ): "a test lane: `make test` runs it",
    "AREAL_WORKERS_KUBECONFIG=~/.kube/config make test-integration": "the tests against another cluster",
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
DOCS_NAMESPACE = "rl"  # where the pages apply rbac/
POLICY_CLEANUP = f"kubectl delete --ignore-not-found -f rbac/{POLICY_FILE.name}"


@dataclass
class Block:
    language: str
    text: str


def blocks(page: str) -> list[Block]:
    return [Block(language, text) for language, text in BLOCK.findall((REPO / page).read_text())]


def commands(text: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line and not line.startswith("#"):
            found.append(re.sub(r"\s{2,}", " ", line))
    return found


def page_commands(page: str) -> list[str]:
    return [command for block in blocks(page) if block.language == "bash" for command in commands(block.text)]


def test_the_chinese_pages_carry_the_english_commands():
    for english, chinese in CHINESE_PAGES.items():
        assert page_commands(chinese) == page_commands(english), chinese


def test_every_command_not_run_is_still_in_the_docs():
    everywhere = {command for page in ENGLISH_PAGES for command in page_commands(page)}
    assert sorted(set(NOT_RUN) - everywhere) == []


def sandbox(directory: Path, page: str, kubeconfig: Path) -> dict[str, str]:
    """The checkout (links to each top-level entry), the page's files, a kubeconfig of the reader's own. Its rbac/
    holds the checkout's files, but the admission policy's bindings select the docs' namespace alone: applied as
    written they would act on the controller of every namespace of the cluster, which other tests share."""
    for entry in REPO.iterdir():
        if entry.name not in (".git", "rbac"):
            (directory / entry.name).symlink_to(entry)
    (directory / "rbac").mkdir()
    for entry in (REPO / "rbac").iterdir():
        if entry != POLICY_FILE:
            (directory / "rbac" / entry.name).symlink_to(entry)
    (directory / "rbac" / POLICY_FILE.name).write_text(yaml.safe_dump_all(scoped_policy(DOCS_NAMESPACE, None)))
    for block in blocks(page):
        header = FILE_HEADER.match(block.text)
        if block.language == "yaml" and header:
            name = directory / header.group(1)
            if name.is_symlink():
                name.unlink()
            name.write_text(block.text)
    shutil.copy(kubeconfig, directory / "kubeconfig")
    path = os.pathsep.join([str(REPO / ".tools" / "bin"), str(REPO / ".venv" / "bin"), os.environ["PATH"]])
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("AREAL_K8S_", "PYTEST"))}
    return {**environment, "PATH": path, "KUBECONFIG": str(directory / "kubeconfig")}


def scripts(page: str) -> list[tuple[str, str | None]]:
    """(bash script, stdin) for each bash block that has a command to run."""
    found: list[tuple[str, str | None]] = []
    page_blocks = blocks(page)
    for index, block in enumerate(page_blocks):
        if block.language != "bash":
            continue
        lines = [command for command in commands(block.text) if command not in NOT_RUN]
        stdin = None
        if ".venv/bin/python" in lines:
            stdin = next(b.text for b in page_blocks[index + 1 :] if b.language == "python")
        if lines:
            found.append(("\n".join(lines), stdin))
    return found


def namespaces(core: client.CoreV1Api) -> set[str]:
    return {namespace.metadata.name for namespace in core.list_namespace().items}


@pytest.mark.timeout(4 * BLOCK_TIMEOUT)
@pytest.mark.parametrize("page", [page for page in ENGLISH_PAGES if scripts(page)])
def test_the_pages_commands_run_on_the_local_cluster(page, kubeconfig, core, tmp_path):
    before = namespaces(core)
    environment = sandbox(tmp_path, page, kubeconfig)
    try:
        for script, stdin in [("\n".join(GIVEN.get(page, [])), None), *scripts(page)]:
            if not script:
                continue
            result = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", script],
                input=stdin,
                text=True,
                capture_output=True,
                cwd=tmp_path,
                env=environment,
                timeout=BLOCK_TIMEOUT,
            )
            assert result.returncode == 0, (
                f"{page}: exit {result.returncode} of\n{script}\n--- stdout\n"
                f"{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
            )
    finally:
        for command in [*CLEANUP.get(page, []), POLICY_CLEANUP]:
            subprocess.run(["bash", "-c", command], cwd=tmp_path, env=environment, capture_output=True, timeout=300)
        # Only the namespaces the page's commands name: other lanes make namespaces meanwhile.
        named = set(
            re.findall(
                r"[a-z0-9-]+",
                "\n".join(
                    [
                        *GIVEN.get(page, []),
                        *(text for text, _ in scripts(page)),
                        *(block.text for block in blocks(page)),
                    ]
                ),
            )
        )
        made = (namespaces(core) - before) & named
        for name in made:
            core.delete_namespace(name)
        deadline = time.monotonic() + 300
        while made & namespaces(core) and time.monotonic() < deadline:
            time.sleep(1)
