"""docs/en/configuration.md and docs/zh/configuration.md are what tools/docgen/config.py generates from the code
(KubernetesSchedulerConfig, the variables from_env reads, the chart's values), and the generator refuses an option
the code does not describe."""

from __future__ import annotations

import dataclasses
import difflib

import pytest

import docgen.config as config_docs
from areal_workers import config as config_module
from areal_workers.config import ENVIRONMENT, NAMESPACE_FALLBACK_VARIABLE, KubernetesSchedulerConfig
from docgen.config import REGENERATE, ConfigDocsError, attribute_docs, options
from repo_paths import REPO


def test_the_committed_pages_are_the_generated_ones():
    stale = []
    for path, expected in config_docs.expected_pages().items():
        actual = path.read_text() if path.is_file() else ""
        if actual != expected:
            diff = difflib.unified_diff(
                actual.splitlines(), expected.splitlines(), str(path.relative_to(REPO)), "generated", lineterm="", n=0
            )
            stale.append("\n".join(list(diff)[:30]))
    assert not stale, f"configuration reference out of date; run {REGENERATE}\n" + "\n\n".join(stale)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_option_variable_and_chart_value_is_on_the_page(lang):
    text = config_docs.PAGES[lang].read_text()
    for field in dataclasses.fields(KubernetesSchedulerConfig):
        assert f"| `{field.name}` |" in text, field.name
    for variable in [*ENVIRONMENT, NAMESPACE_FALLBACK_VARIABLE]:
        assert f"`{variable}`" in text, variable
    for key in ("`workerDefaults.resources.gpu`", "`roles.<name>.replicas`", "`networkPolicy.enabled`"):
        assert f"| {key} |" in text


def test_the_variables_are_the_ones_from_env_reads():
    """The page's variables come from the tables from_env uses: a variable from_env honours is set by its row."""
    sample = {
        "node_selector": "pool=gpu",
        "termination_grace_seconds": "7",
        "image_pull_policy": "Never",
        "lease_grace_seconds": "60",
        "lease_takeover": "true",
        "values_files": "a.yaml",
        "image_pull_secrets": "s",
        "guard_port": "9000",
        "n_gpus_per_node": "4",
        "history_max": "5",
        "helm_timeout": "90",
        "ready_timeout": "90",
        "fork_ready_timeout": "90",
        "destroy_timeout": "90",
        "fork_mode": "pod",
        "capacity_check": "warn",
        "ownership": "external",
        "trainer_address": "127.0.0.1",
        "metrics_address": "127.0.0.1:9090",
        "log_format": "json",
    }
    # The owner pod's (or Job's) name and uid are set together (from the downward API), a Kueue priority class with
    # its queue; each row still sets its own field.
    companions = {
        "AREAL_K8S_OWNER_POD": {"AREAL_K8S_OWNER_POD_UID": "uid-1"},
        "AREAL_K8S_OWNER_POD_UID": {"AREAL_K8S_OWNER_POD": "trainer-0"},
        "AREAL_K8S_OWNER_JOB": {"AREAL_K8S_OWNER_JOB_UID": "uid-2"},
        "AREAL_K8S_OWNER_JOB_UID": {"AREAL_K8S_OWNER_JOB": "trainer"},
        # A Kueue priority class needs the queue it orders, an external release its name.
        "AREAL_K8S_KUEUE_PRIORITY_CLASS": {"AREAL_K8S_KUEUE_QUEUE": "lq"},
        "AREAL_K8S_OWNERSHIP": {"AREAL_K8S_RELEASE_NAME": "theirs"},
    }
    for variable in config_docs.variables():
        config = KubernetesSchedulerConfig.from_env(
            {variable.name: sample.get(variable.field, "some-text"), **companions.get(variable.name, {})}
        )
        assert getattr(config, variable.field) != getattr(KubernetesSchedulerConfig(), variable.field), variable
    assert KubernetesSchedulerConfig.from_env({NAMESPACE_FALLBACK_VARIABLE: "ns"}).namespace == "ns"


def test_formats_come_from_the_parsers_from_env_uses():
    formats = {variable.field: variable.format for variable in config_docs.variables()}
    assert formats["termination_grace_seconds"] == "an integer number of seconds, e.g. `120`"
    assert formats["node_selector"].startswith("`k=v,k2=v2`")
    assert formats["namespace"] is None
    assert set(config_module.ENVIRONMENT_PARSERS) <= set(ENVIRONMENT.values())


def test_shared_and_continued_descriptions_are_read():
    docs = attribute_docs()
    assert docs["chart_version"] == docs["chart_repo"] == "for repository and OCI references."
    assert docs["capacity_check"].endswith('"off" skips the check.')
    assert set(docs) == {field.name for field in dataclasses.fields(KubernetesSchedulerConfig)}


def test_the_bundled_chart_default_is_not_a_path_of_this_machine():
    chart = next(option for option in options() if option.name == "chart")
    assert chart.default == "`areal_workers/chart`"


@dataclasses.dataclass(frozen=True)
class _Undocumented:
    """A config class.

    Attributes:
        described: has a description.
        ghost: not a field.
    """

    described: int = 1
    forgotten: str = "x"


def test_an_option_without_a_description_is_refused():
    with pytest.raises(ConfigDocsError) as refused:
        options(_Undocumented)
    assert "forgotten: not described" in str(refused.value)
    assert "ghost: described in _Undocumented's docstring, but it is not a field" in str(refused.value)
