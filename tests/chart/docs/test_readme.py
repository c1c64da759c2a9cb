import json
import re

import pytest
import yaml

from chartlib import CHART
from docgen.chart import resolve

README = (CHART / "README.md").read_text()
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def _resolve(node: dict) -> dict:
    return resolve(SCHEMA, node)


def leaf_keys(value=VALUES, schema=SCHEMA, path=()):
    """Every documented value: descend while the schema lists properties (Kubernetes objects are leaves)."""
    schema = _resolve(schema)
    if isinstance(value, dict) and value and "properties" in schema:
        for key, child in value.items():
            yield from leaf_keys(child, schema["properties"][key], (*path, key))
    else:
        yield ".".join(path)


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def documented_keys() -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", section("Values"), re.M))


def test_every_leaf_value_is_in_the_readme_table():
    keys = list(leaf_keys())
    assert len(keys) > 70
    missing = [k for k in keys if k not in documented_keys()]
    assert not missing, f"document these values in charts/areal-workers/README.md: {missing}"


def test_readme_documents_no_value_that_does_not_exist():
    leaves = set(leaf_keys())
    extra = [k for k in documented_keys() if k not in leaves and not k.startswith(("roles.<name>.", "forks.<name>."))]
    assert not extra, extra
    fork_keys = {k.split(".", 2)[2] for k in documented_keys() if k.startswith("forks.<name>.")}
    assert fork_keys == set(SCHEMA["definitions"]["fork"]["properties"])


def test_readme_documents_the_worker_env_and_quick_start():
    for name in (
        "POD_NAME",
        "POD_NAMESPACE",
        "POD_IP",
        "AREAL_WORKER_INDEX",
        "AREAL_EXPERIMENT_NAME",
        "AREAL_TRIAL_NAME",
        "AREAL_ROLE",
        "AREAL_WORKER_ID",
        "AREAL_CACHE_DIR",
        "TOKENIZERS_PARALLELISM",
        "PYTORCH_KERNEL_CACHE_PATH",
        "TRITON_CACHE_DIR",
        "VLLM_CACHE_ROOT",
        "CUDA_DEVICE_MAX_CONNECTIONS",
    ):
        assert f"| `{name}` |" in README, name
    assert "| `TMS_INIT_ENABLE`, `TMS_INIT_ENABLE_CPU_BACKUP` |" in README
    assert "-f examples/values-example.yaml" in README
    assert "helm test" in README


@pytest.mark.parametrize(
    "feature,level",
    [
        ("CPU or GPU roles", "restricted"),
        ("runAsUser: 0", "baseline"),
        ("nfs", "baseline"),
        ("hostNetwork: true", "privileged"),
        ("rdma.enabled: true", "privileged"),
        ("hostPath", "privileged"),
    ],
)
def test_readme_podsecurity_table(feature, level):
    rows = [
        line
        for line in section("Security and PodSecurity levels").splitlines()
        if line.startswith("| ") and feature in line.split("|")[1]
    ]
    assert len(rows) == 1 and rows[0].split("|")[2].strip() == level, rows
