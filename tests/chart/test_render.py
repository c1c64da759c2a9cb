import re

import pytest
import yaml

from chartlib import CHART, FULL_VALUES, HELM, HELM4, REPO, run_helm, template_text

EXAMPLES = sorted((REPO / "examples").glob("values-*.yaml"))


def test_examples_exist():
    assert [p.name for p in EXAMPLES] == ["values-argocd.yaml", "values-example.yaml", "values-gpu.yaml"]


@pytest.mark.parametrize("values_file", [None, *EXAMPLES], ids=lambda p: p.name if p else "default")
@pytest.mark.parametrize("helm", [HELM, HELM4], ids=["helm3", "helm4"])
def test_lint_strict(values_file, helm):
    args = ["lint", "--strict", str(CHART)] + (["-f", str(values_file)] if values_file else [])
    out = run_helm(*args, helm=helm).stdout
    assert "0 chart(s) failed" in out and "[WARNING]" not in out and "[ERROR]" not in out


@pytest.mark.parametrize("values_file", [None, *EXAMPLES], ids=lambda p: p.name if p else "default")
def test_rendering_is_deterministic(values_file):
    extra = ("-f", str(values_file)) if values_file else ()
    first = template_text({}, extra=extra).stdout
    assert first == template_text({}, extra=extra).stdout
    full = template_text(FULL_VALUES).stdout
    assert full == template_text(FULL_VALUES).stdout


def test_templates_use_no_cluster_lookups_randomness_or_time():
    forbidden = re.compile(
        r"\b(lookup|now|date|dateInZone|unixEpoch|randAlphaNum|randAlpha|randNumeric|randAscii|randBytes|randInt|uuidv4|genPrivateKey|genCA|genSelfSignedCert|genSignedCert|derivePassword)\b"
    )
    for path in (CHART / "templates").rglob("*"):
        if path.is_file():
            code = " ".join(re.findall(r"\{\{(.*?)\}\}", path.read_text(), re.S))
            assert not forbidden.search(code), f"{path.name}: {forbidden.search(code).group(0)}"


def _documents(text: str) -> list[dict]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        d["metadata"].get("labels", {}).pop("helm.sh/chart", None)
    return docs


@pytest.mark.parametrize("values_file", [None, *EXAMPLES], ids=lambda p: p.name if p else "default")
def test_helm4_renders_the_same_as_helm3(values_file):
    extra = ("-f", str(values_file)) if values_file else ()
    h3 = template_text({}, extra=extra).stdout
    h4 = template_text({}, extra=extra, helm=HELM4).stdout
    assert _documents(h3) == _documents(h4)
    # helm 4 only adds a blank line before each "---".
    assert [line for line in h3.splitlines() if line.strip()] == [line for line in h4.splitlines() if line.strip()]
    assert template_text(FULL_VALUES).stdout.split() == template_text(FULL_VALUES, helm=HELM4).stdout.split()


def test_helm4_schema_and_preflight_errors():
    err = template_text({"roles": {"a": {"replicas": -1}}}, helm=HELM4, check=False).stderr
    assert "/roles/a/replicas" in err
    err = template_text({"experiment": ""}, helm=HELM4, check=False).stderr
    assert "experiment is empty" in err


def test_kube_version_floor():
    """Kubernetes 1.28 is the first to label StatefulSet pods with apps.kubernetes.io/pod-index by default."""
    assert template_text({}, extra=("--kube-version", "1.28.0")).returncode == 0
    err = template_text({}, extra=("--kube-version", "1.27.9"), check=False).stderr
    assert "kubeVersion" in err or "incompatible" in err, err
