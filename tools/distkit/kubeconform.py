"""Offline `kubeconform -strict`: the strict JSON schemas that kubernetes-validate ships for the Kubernetes minor
pinned in tools/install/versions.env, laid out as kubeconform reads them. Used by `make release` (the packaged chart's
render), the chart's kubeconform tests (tests/chart/test_chart_tools.py) and the documentation's examples
(tests/unit/docs/test_docs_examples.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

from repo_paths import REPO, TOOLS_BIN

KUBECONFORM = TOOLS_BIN / "kubeconform"


def pinned_kubernetes_minor() -> str:
    for line in (REPO / "tools" / "install" / "versions.env").read_text().splitlines():
        if line.startswith("KUBERNETES_VERSION="):
            major, minor = line.split("=", 1)[1].lstrip("v").split(".")[:2]
            return f"{major}.{minor}"
    raise AssertionError("KUBERNETES_VERSION missing from tools/install/versions.env")


def schema_directory() -> Path:
    source = (
        Path(kubernetes_validate.__file__).parent
        / "kubernetes-json-schema"
        / f"v{pinned_kubernetes_minor()}.0-local-strict"
    )
    assert source.is_dir(), f"kubernetes-validate {kubernetes_validate.__version__} has no schemas for {source.name}"
    return source


def schema_name(document: dict) -> str:
    """kubeconform's file name for a document's schema: <kind>[-<group>]-<version>.json."""
    group_version = document["apiVersion"].split("/")
    suffix = "-".join([group_version[0].split(".")[0], group_version[1]] if len(group_version) == 2 else group_version)
    return f"{document['kind'].lower()}-{suffix}.json"


def has_schema(document: dict) -> bool:
    """Whether the pinned Kubernetes API has a schema for the document's kind (custom resources have none)."""
    return (schema_directory() / schema_name(document)).is_file()


def standalone_strict_schemas(manifests: str, out: Path) -> Path:
    """kubeconform's layout (<kind>[-<group>]-<version>.json, self-contained) built from the strict schemas that
    kubernetes-validate ships for the pinned Kubernetes minor; theirs reference a shared definitions file by an
    absolute path kubeconform cannot resolve, so the definitions are embedded."""
    source = schema_directory()
    definitions = json.loads((source / "_definitions.json").read_text())["$defs"]
    for document in filter(None, yaml.safe_load_all(manifests)):
        name = schema_name(document)
        text = (source / name).read_text().replace('"/api/_definitions.json#/$defs/', '"#/$defs/')
        schema = json.loads(text)
        schema["$defs"] = json.loads(json.dumps(definitions).replace('"/api/_definitions.json#/$defs/', '"#/$defs/'))
        (out / name).write_text(json.dumps(schema))
    return out


def kubeconform(manifests: str, workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    """`kubeconform -strict -summary` of `manifests` (YAML documents) against the pinned Kubernetes' schemas."""
    schemas = standalone_strict_schemas(manifests, workdir)
    return subprocess.run(
        [
            str(KUBECONFORM),
            "-strict",
            "-summary",
            *extra,
            "-schema-location",
            f"{schemas}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
            "-",
        ],
        input=manifests,
        capture_output=True,
        text=True,
        timeout=120,
    )
