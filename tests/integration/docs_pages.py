"""The docs' pages as the tests run them: a page's ```bash blocks, each one `bash -e` script, in a sandbox directory
that holds the checkout (links) and the files the page shows (a ```yaml block whose first line is
`# values: FILE, ...` or `# file: FILE, ...` is written to FILE), with .tools/bin and .venv/bin on PATH and a copy
of the local cluster's admin kubeconfig as KUBECONFIG. A line `.venv/bin/python` reads the page's next ```python
block. The sandbox's rbac/cluster/admission-policy.yaml is bound to the docs' namespace alone (sandbox()). Used by
test_docs_commands.py and test_deployment_guide.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client

from localkube.rbac import POLICY_FILE, scoped_policy
from repo_paths import REPO

BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FILE_HEADER = re.compile(r"^# (?:values|file): (\S+?),")
BLOCK_TIMEOUT = 900
DOCS_NAMESPACE = "rl"  # where the pages apply rbac/
POLICY_CLEANUP = f"kubectl delete --ignore-not-found -f rbac/cluster/{POLICY_FILE.name}"


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


def sandbox(directory: Path, page: str, kubeconfig: Path, policy_namespaces: tuple[str, ...] = ()) -> dict[str, str]:
    """The checkout (links to each top-level entry), the page's files, a kubeconfig of the reader's own. Its rbac/
    holds the checkout's files, but the admission policy's bindings (rbac/cluster/) select the docs' namespace alone,
    and `policy_namespaces`: applied as written they would act on the controller of every namespace of the cluster,
    which other tests share."""
    for entry in REPO.iterdir():
        if entry.name not in (".git", "rbac"):
            (directory / entry.name).symlink_to(entry)
    (directory / "rbac").mkdir()
    for entry in (REPO / "rbac").iterdir():
        if entry != POLICY_FILE.parent:
            (directory / "rbac" / entry.name).symlink_to(entry)
    (directory / "rbac" / "cluster").mkdir()
    copy = scoped_policy(DOCS_NAMESPACE, None, namespaces=policy_namespaces)
    (directory / "rbac" / "cluster" / POLICY_FILE.name).write_text(yaml.safe_dump_all(copy))
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


def scripts(page: str, not_run: dict[str, str]) -> list[tuple[str, str | None]]:
    """(bash script, stdin) for each bash block that has a command to run (one not in `not_run`)."""
    found: list[tuple[str, str | None]] = []
    page_blocks = blocks(page)
    for index, block in enumerate(page_blocks):
        if block.language != "bash":
            continue
        lines = [command for command in commands(block.text) if command not in not_run]
        stdin = None
        if ".venv/bin/python" in lines:
            stdin = next(b.text for b in page_blocks[index + 1 :] if b.language == "python")
        if lines:
            found.append(("\n".join(lines), stdin))
    return found


def namespaces(core: client.CoreV1Api) -> set[str]:
    return {namespace.metadata.name for namespace in core.list_namespace().items}


def remove_made_namespaces(core: client.CoreV1Api, before: set[str], page: str, scripts_run: list[str]) -> None:
    """Deletes the namespaces made since `before` that the page names (other lanes make namespaces meanwhile), and
    waits until they are gone."""
    named = set(re.findall(r"[a-z0-9-]+", "\n".join([*scripts_run, *(block.text for block in blocks(page))])))
    made = (namespaces(core) - before) & named
    for name in made:
        core.delete_namespace(name)
    deadline = time.monotonic() + 300
    while made & namespaces(core) and time.monotonic() < deadline:
        time.sleep(1)


def run_script(script: str, stdin: str | None, directory: Path, environment: dict[str, str], page: str) -> None:
    """Runs one block's script in the sandbox; a failure shows the script and the end of its output."""
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        input=stdin,
        text=True,
        capture_output=True,
        cwd=directory,
        env=environment,
        timeout=BLOCK_TIMEOUT,
    )
    assert result.returncode == 0, (
        f"{page}: exit {result.returncode} of\n{script}\n--- stdout\n"
        f"{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
    )
