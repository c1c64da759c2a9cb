"""Every YAML example in the documentation renders and validates.

The convention (docs/en/testing.md, "Documentation tests"): a fenced block with the info string `yaml` is

- a **values example** when its first line is a comment starting with `# values`: it is rendered with
  `helm template` of charts/areal-workers (which applies the chart's values.schema.json and its own checks), and
  the rendered manifests pass `kubeconform -strict` against the pinned Kubernetes' schemas;
- a **manifest example** when every YAML document in it has `apiVersion` and `kind`: each passes
  `kubeconform -strict`; an Argo CD Application (no offline schema exists for it) must point at a directory of
  this repository, and when that is the chart its Helm values (valueFiles inside this repository, then the inline
  values) are rendered and validated as above;
- an **AReaL config fragment** when its first line is a comment starting with `# AReaL config`: it must parse as
  YAML (AReaL's own config classes are not checked here);
- a **job file** of the `areal-workers` command when its first line is a comment that mentions `job file`: it is
  rendered with `areal-workers render -f` (the adapter's translation of AReaL Jobs into values, then
  `helm template`) and the manifests pass `kubeconform -strict`;
- a **submit file** of `areal-workers submit` when its first line is a comment that mentions `submit file`: the Job
  that submit makes of it passes `kubeconform -strict`;
- anything else fails the test: mark it, or use another info string.

The repository's own manifests (examples/argocd-application.yaml, rbac/*.yaml, rbac/cluster/*.yaml) are checked
the same way; the chart's examples/values-*.yaml are rendered and validated by tests/chart/test_chart_tools.py.
Needs helm and kubeconform (`make tools`), no cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from areal_workers.release.client import merge_values
from distkit.kubeconform import KUBECONFORM, has_schema, kubeconform
from docslib import REPO, Block, documents, parse

pytestmark = pytest.mark.chart  # needs helm and kubeconform; `make test-unit` leaves it to `make test-chart`

CHART = REPO / "charts" / "areal-workers"
HELM = os.environ.get("HELM") or os.environ.get("AREAL_WORKERS_HELM") or str(REPO / ".tools" / "bin" / "helm")
RELEASE, NAMESPACE = "example", "areal"
VALUES_MARK, AREAL_MARK = "# values", "# AReaL config"
JOB_FILE_MARK = re.compile(r"^#.*\bjob file\b", re.IGNORECASE)
SUBMIT_FILE_MARK = re.compile(r"^#.*\bsubmit file\b", re.IGNORECASE)
ARGO_APPLICATION = ("argoproj.io/v1alpha1", "Application")
REPOSITORY_MANIFESTS = [
    REPO / "examples" / "argocd-application.yaml",
    *sorted((REPO / "rbac").glob("*.yaml")),
    *sorted((REPO / "rbac" / "cluster").glob("*.yaml")),
]


@dataclass(frozen=True)
class Example:
    where: str
    text: str

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")

    @property
    def kind(self) -> str:
        """values, manifest, areal-config, job-file, submit-file, or unknown."""
        if self.first_line.startswith(VALUES_MARK):
            return "values"
        if self.first_line.startswith(AREAL_MARK):
            return "areal-config"
        if JOB_FILE_MARK.match(self.first_line):
            return "job-file"
        if SUBMIT_FILE_MARK.match(self.first_line):
            return "submit-file"
        try:
            documents_ = [d for d in yaml.safe_load_all(self.text) if d is not None]
        except yaml.YAMLError:
            return "unknown"
        if documents_ and all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in documents_):
            return "manifest"
        return "unknown"


def _unique(blocks: list[Block]) -> list[Example]:
    """One example per distinct text, named by every place it appears (the zh pages repeat most en examples: each
    is rendered once, and a failure names both pages)."""
    places: dict[str, list[str]] = {}
    for block in blocks:
        places.setdefault(block.text, []).append(block.where)
    return [Example(" = ".join(wheres), text) for text, wheres in places.items()]


DOC_EXAMPLES = _unique([block for path in documents() for block in parse(path).blocks if block.info in ("yaml", "yml")])
FILE_EXAMPLES = [Example(str(path.relative_to(REPO)), path.read_text()) for path in REPOSITORY_MANIFESTS]


def _ids(examples: list[Example]) -> list[str]:
    return [example.where for example in examples]


def _of_kind(examples: list[Example], kind: str) -> list[Example]:
    return [example for example in examples if example.kind == kind]


@pytest.fixture(scope="module", autouse=True)
def tools():
    missing = [
        str(Path(tool).relative_to(REPO)) if Path(tool).is_relative_to(REPO) else tool
        for tool in (HELM, str(KUBECONFORM))
        if not Path(tool).exists()
    ]
    if missing:
        pytest.fail(f"needs {', '.join(missing)}: run `make tools`")


# --- the checks, usable on any text ------------------------------------------------------------------------


def render(
    values_text: str, tmp_path: Path, release: str = RELEASE, namespace: str = NAMESPACE, chart: Path = CHART
) -> subprocess.CompletedProcess:
    values = tmp_path / "values.yaml"
    values.write_text(values_text)
    return subprocess.run(
        [HELM, "template", release, str(chart), "-n", namespace, "-f", str(values)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KUBECONFIG": os.devnull},
    )


def validate(manifests: str, tmp_path: Path) -> list[str]:
    """kubeconform's complaints about `manifests` (YAML documents), [] when every document is valid."""
    documents_ = [d for d in yaml.safe_load_all(manifests) if d is not None]
    unknown = [f"{d.get('apiVersion')}/{d.get('kind')}" for d in documents_ if not has_schema(d)]
    if unknown:
        return [f"no schema of the pinned Kubernetes API for {', '.join(unknown)}"]
    schemas = tmp_path / "schemas"
    schemas.mkdir(exist_ok=True)
    result = kubeconform(manifests, schemas, "-output", "text")
    if result.returncode != 0 or "Invalid: 0, Errors: 0, Skipped: 0" not in result.stdout:
        return [result.stdout + result.stderr]
    return []


def values_problems(values_text: str, tmp_path: Path, **render_args) -> list[str]:
    rendered = render(values_text, tmp_path, **render_args)
    if rendered.returncode != 0:
        return [f"helm template failed:\n{rendered.stderr}"]
    return validate(rendered.stdout, tmp_path)


def job_file_problems(job_text: str, tmp_path: Path) -> list[str]:
    """A job file of the `areal-workers` command: what `render -f` makes of it, validated."""
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_text)
    env = {**os.environ, "KUBECONFIG": os.devnull, "PATH": f"{Path(HELM).parent}{os.pathsep}{os.environ['PATH']}"}
    rendered = subprocess.run(
        [sys.executable, "-m", "areal_workers.cli", "render", "-f", str(job_file), "--show", "manifests"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if rendered.returncode != 0:
        return [f"areal-workers render -f failed (exit {rendered.returncode}):\n{rendered.stderr}"]
    return validate(rendered.stdout, tmp_path)


def submit_file_problems(submit_text: str, tmp_path: Path) -> list[str]:
    """A submit file of `areal-workers submit`: the Job it makes, validated."""
    from areal_workers.trainer.job import load_spec, trainer_job

    submit_file = tmp_path / "trainer.yaml"
    submit_file.write_text(submit_text)
    job = trainer_job(load_spec(submit_file, {}), ["python", "train.py"], NAMESPACE)
    return validate(yaml.safe_dump(job), tmp_path)


def application_problems(application: dict, tmp_path: Path) -> list[str]:
    """An Argo CD Application: its source is a directory of this repository; a Helm source renders and validates."""
    spec = application.get("spec") or {}
    source, destination = spec.get("source") or {}, spec.get("destination") or {}
    problems = []
    path = REPO / str(source.get("path", ""))
    if not source.get("path") or not path.is_dir():
        problems.append(f"spec.source.path {source.get('path')!r} is not a directory of this repository")
    if not destination.get("namespace") or not (destination.get("server") or destination.get("name")):
        problems.append("spec.destination needs a namespace and a server or name")
    helm = source.get("helm")
    if helm is not None and not problems:
        if not (path / "Chart.yaml").is_file():
            return [f"spec.source.helm is set but {source['path']} is not a chart"]
        layers = []
        for name in helm.get("valueFiles") or []:  # relative to the source path, inside the repository
            file = (path / name).resolve()
            if REPO not in file.parents or not file.is_file():
                return [f"spec.source.helm.valueFiles: {name} is not a file of this repository"]
            layers.append(yaml.safe_load(file.read_text()) or {})
        layers.append(helm.get("valuesObject") or yaml.safe_load(helm.get("values") or "{}") or {})
        problems += values_problems(
            json.dumps(merge_values(*layers)),
            tmp_path,
            release=helm.get("releaseName") or "example",
            namespace=destination["namespace"],
            chart=path,
        )
    return problems


def manifest_problems(text: str, tmp_path: Path) -> list[str]:
    documents_ = [d for d in yaml.safe_load_all(text) if d is not None]
    problems = []
    kubernetes = []
    for document in documents_:
        if (document.get("apiVersion"), document.get("kind")) == ARGO_APPLICATION:
            problems += application_problems(document, tmp_path)
        else:
            kubernetes.append(document)
    if kubernetes:
        problems += validate(yaml.safe_dump_all(kubernetes), tmp_path)
    return problems


# --- the documentation's examples --------------------------------------------------------------------------


def test_the_docs_have_examples_of_each_kind():
    kinds = {example.kind for example in DOC_EXAMPLES}
    assert {"values", "manifest", "areal-config"} <= kinds, kinds


@pytest.mark.parametrize("example", DOC_EXAMPLES, ids=_ids(DOC_EXAMPLES))
def test_every_yaml_block_is_marked(example):
    assert example.kind != "unknown", (
        f"{example.where}: a yaml block must start with `{VALUES_MARK}` (chart values), `{AREAL_MARK}` (a fragment "
        "of AReaL's experiment config) or a comment naming a `job file` or a `submit file`, or hold Kubernetes "
        "manifests (apiVersion and kind); "
        "see docs/en/testing.md#documentation-tests"
    )


@pytest.mark.parametrize("example", _of_kind(DOC_EXAMPLES, "values"), ids=_ids(_of_kind(DOC_EXAMPLES, "values")))
def test_values_examples_render_and_validate(example, tmp_path):
    problems = values_problems(example.text, tmp_path)
    assert not problems, f"{example.where}:\n" + "\n".join(problems)


@pytest.mark.parametrize("example", _of_kind(DOC_EXAMPLES, "manifest"), ids=_ids(_of_kind(DOC_EXAMPLES, "manifest")))
def test_manifest_examples_validate(example, tmp_path):
    problems = manifest_problems(example.text, tmp_path)
    assert not problems, f"{example.where}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "example", _of_kind(DOC_EXAMPLES, "areal-config"), ids=_ids(_of_kind(DOC_EXAMPLES, "areal-config"))
)
def test_areal_config_fragments_parse(example):
    assert isinstance(yaml.safe_load(example.text), dict), example.where


@pytest.mark.parametrize("example", _of_kind(DOC_EXAMPLES, "job-file"), ids=_ids(_of_kind(DOC_EXAMPLES, "job-file")))
def test_job_file_examples_render_and_validate(example, tmp_path):
    problems = job_file_problems(example.text, tmp_path)
    assert not problems, f"{example.where}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "example", _of_kind(DOC_EXAMPLES, "submit-file"), ids=_ids(_of_kind(DOC_EXAMPLES, "submit-file"))
)
def test_submit_file_examples_make_valid_jobs(example, tmp_path):
    problems = submit_file_problems(example.text, tmp_path)
    assert not problems, f"{example.where}:\n" + "\n".join(problems)


@pytest.mark.parametrize("example", FILE_EXAMPLES, ids=_ids(FILE_EXAMPLES))
def test_repository_manifests_validate(example, tmp_path):
    assert example.kind == "manifest", example.where
    problems = manifest_problems(example.text, tmp_path)
    assert not problems, f"{example.where}:\n" + "\n".join(problems)


# --- the checks catch what they must -----------------------------------------------------------------------

VALID_VALUES = "# values\nroles:\n  actor:\n    replicas: 1\n"


def test_a_valid_values_example_passes(tmp_path):
    assert values_problems(VALID_VALUES, tmp_path) == []


@pytest.mark.parametrize(
    "broken,expected",
    [
        (VALID_VALUES + "    replica: 2\n", "replica"),  # the schema: unknown key
        (VALID_VALUES.replace("replicas: 1", "replicas: -1"), "replicas"),  # the schema: minimum
        (VALID_VALUES + "colocations:\n  critic: nobody\n", "nobody"),  # the chart's own check
        (VALID_VALUES + "    podAnnotations:\n      x: 1\n", "podAnnotations"),  # kubeconform: not a string
    ],
    ids=["unknown-key", "negative-replicas", "colocation-target", "annotation-type"],
)
def test_a_broken_values_example_fails(broken, expected, tmp_path):
    problems = values_problems(broken, tmp_path)
    assert problems and expected in "\n".join(problems), problems


def test_a_broken_manifest_fails(tmp_path):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "imagePulPolicy": "Always"}]},
    }
    assert manifest_problems(yaml.safe_dump(pod), tmp_path)
    assert not manifest_problems(
        yaml.safe_dump({**pod, "spec": {"containers": [{"name": "c", "image": "b"}]}}), tmp_path
    )


def test_a_manifest_of_an_unknown_kind_fails(tmp_path):
    problems = manifest_problems("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n", tmp_path)
    assert problems and "no schema" in problems[0]


def test_a_broken_application_fails(tmp_path):
    app = yaml.safe_load((REPO / "examples" / "argocd-application.yaml").read_text())
    assert application_problems(app, tmp_path) == []
    app["spec"]["source"]["helm"]["valuesObject"] = {"roles": {"actor": {"replicas": "two"}}}
    assert application_problems(app, tmp_path)
    del app["spec"]["source"]["helm"]["valuesObject"]
    app["spec"]["source"]["helm"]["valueFiles"] = ["../../../outside.yaml"]
    assert "not a file of this repository" in application_problems(app, tmp_path)[0]
    app["spec"]["source"]["path"] = "charts/missing"
    assert "not a directory" in application_problems(app, tmp_path)[0]


def test_a_broken_job_file_fails(tmp_path):
    job = "# a job file\nrole: actor\nreplicas: 2\ntasks:\n  - {cpu: 1, mem: 1, gpus: 1}\n"
    assert job_file_problems(job, tmp_path)
    assert not job_file_problems(job.replace("gpus", "gpu"), tmp_path)


def test_an_unmarked_yaml_block_is_refused():
    assert Example("x", "roles:\n  actor:\n    replicas: 1\n").kind == "unknown"
    assert Example("x", "# values: two roles\nroles: {}\n").kind == "values"
    assert Example("x", "# AReaL config\nscheduler:\n  type: kubernetes\n").kind == "areal-config"
    assert Example("x", "# A job file for `areal-workers render -f`\nrole: actor\n").kind == "job-file"
