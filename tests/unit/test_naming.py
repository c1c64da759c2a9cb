import hashlib
import os
import re
import subprocess
import sys

import pytest

from areal_workers import naming
from areal_workers.naming import (
    parse_worker_id,
    release_name,
    release_selector,
    role_problem,
    role_selector,
    worker_id,
)
from repo_paths import REPO

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
HASHED = re.compile(r"^(?P<prefix>.*)-(?P<digest>[0-9a-f]{8})$")
ADAPTER = REPO / "adapter"
HELPERS = REPO / "charts" / "areal-workers" / "templates" / "_helpers.tpl"


def valid_release(name: str) -> bool:
    return bool(DNS_1123_LABEL.match(name)) and len(name) <= 53


# --- release_name -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "experiment,trial,prefix",
    [
        ("exp", "trial0", "aw-exp-trial0-"),
        ("gsm8k-grpo", "run1", "aw-gsm8k-grpo-run1-"),
        ("a", "b", "aw-a-b-"),
    ],
)
def test_simple_names_are_readable_and_end_in_a_hash_of_the_pair(experiment, trial, prefix):
    name = release_name(experiment, trial)
    digest = hashlib.sha256(f"{experiment}/{trial}".encode()).hexdigest()[:8]
    assert name == prefix + digest
    assert valid_release(name)


def test_long_names_are_cut_to_53_characters_keeping_the_hash():
    exp = "e" * 60
    name = release_name(exp, "t")
    assert len(name) == 53 and valid_release(name)
    assert name.endswith(hashlib.sha256(f"{exp}/t".encode()).hexdigest()[:8])
    assert release_name(exp + "e", "t") != name


@pytest.mark.parametrize(
    "experiment,trial",
    [
        ("my_exp", "trial0"),
        ("exp", "trial_0"),
        ("Exp", "trial0"),
        ("EXP", "TRIAL"),
        ("exp.v2", "t"),
        ("exp", "t-"),
        ("-exp", "t"),
        ("exp--x", "t"),
        ("", ""),
        ("ünïcode", "trial"),
    ],
)
def test_sanitized_names_get_a_hash_and_are_valid(experiment, trial):
    name = release_name(experiment, trial)
    assert valid_release(name), name
    match = HASHED.match(name)
    assert match, name
    assert match["prefix"].startswith("aw")


def test_underscore_name_keeps_a_readable_prefix():
    name = release_name("my_exp", "trial0")
    assert name.startswith("aw-my-exp-trial0-")
    assert name != release_name("my-exp", "trial0")


def test_uppercase_is_distinct_from_lowercase():
    assert release_name("Exp", "trial0") != release_name("exp", "trial0")
    assert release_name("Exp", "trial0").startswith("aw-exp-trial0-")


@pytest.mark.parametrize(
    "experiment,trial",
    [
        ("x" * 100, "y" * 100),
        ("a" * 60, "t"),
        ("e", "t" * 300),
        ("Long_Experiment_Name_" * 5, "Trial_" * 5),
    ],
)
def test_long_names_fit(experiment, trial):
    name = release_name(experiment, trial)
    assert valid_release(name), name
    assert not name[:-9].endswith("-")


def test_long_names_are_distinct_and_deterministic():
    base = "x" * 80
    names = {release_name(base, f"trial{i}") for i in range(50)}
    assert len(names) == 50
    assert all(valid_release(n) for n in names)
    assert release_name(base, "trial3") == release_name(base, "trial3")


def test_long_names_are_stable_across_processes():
    """No use of hash() (salted per process): the name must be the same in another interpreter."""
    code = "from areal_workers.naming import release_name; print(release_name('x' * 80, 'My_Trial'))"
    here = release_name("x" * 80, "My_Trial")
    for seed in ("1", "2"):
        env = {
            **os.environ,
            "PYTHONHASHSEED": seed,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ADAPTER), os.environ.get("PYTHONPATH")])),
        }
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True
        )
        assert out.stdout.strip() == here


def test_collision_pair_is_distinct():
    first, second = release_name("a", "b_c"), release_name("a-b", "c")
    assert first != second
    assert valid_release(first) and valid_release(second)


def test_distinct_pairs_with_same_slug_are_distinct():
    pairs = [("a", "b_c"), ("a_b", "c"), ("a-b", "c"), ("A", "b-c"), ("a", "B_C"), ("a.b", "c")]
    names = [release_name(*p) for p in pairs]
    assert len(set(names)) == len(pairs), names


def test_dash_split_between_experiment_and_trial_is_distinct():
    """Experiment names may contain '-'; AReaL documents (but does not enforce) that trial names do not.
    ("a-b", "c") and ("a", "b-c") are two different trials and must not share one helm release."""
    assert release_name("a-b", "c") != release_name("a", "b-c")
    assert release_name("gsm8k-grpo", "run-1") != release_name("gsm8k", "grpo-run-1")


# --- role_problem -------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["actor", "rollout", "ref", "a", "a1", "actor-critic", "proxy_rollout", "r" * 40])
def test_valid_roles(role):
    assert role_problem(role) is None


@pytest.mark.parametrize(
    "role",
    ["Actor", "1actor", "actor-", "actor_", "-actor", "a b", "a.b", "a/b", "9", "ACTOR_2", "r" * 41, "", None, 3],
)
def test_invalid_roles(role):
    problem = role_problem(role)
    assert isinstance(problem, str) and problem


def test_empty_role_message():
    assert role_problem("") == "role must be a non-empty string"


def test_too_long_role_message():
    problem = role_problem("r" * 41)
    assert "41 characters" in problem
    assert "40" in problem


SUGGESTION = re.compile(r"\(e\.g\. '(?P<suggestion>[^']*)'\)")


@pytest.mark.parametrize(
    "role",
    [
        "Actor",
        "actor-",
        "actor_",
        "-actor",
        "_x",
        "a b",
        "a.b",
        "a/b",
        "---",
        "ACTOR_2",
        "Rollout.Worker",
        "1actor",
        "9",
        "2-rollout",
    ],
)
def test_suggestion_in_the_message_is_a_valid_role(role):
    problem = role_problem(role)
    match = SUGGESTION.search(problem)
    assert match, problem
    suggestion = match["suggestion"]
    assert role_problem(suggestion) is None, f"{role!r} -> suggested {suggestion!r}, which is invalid too"


def test_role_pattern_matches_the_chart_schema():
    import json

    schema = json.loads((HELPERS.parent.parent / "values.schema.json").read_text())
    role_name = schema["definitions"]["roleName"]
    assert role_name["pattern"] == naming.ROLE_PATTERN.pattern
    assert role_name["maxLength"] == naming.ROLE_MAX


# --- selectors and worker ids -------------------------------------------------------------------


def test_selectors():
    assert release_selector("aw-exp-t") == "app.kubernetes.io/instance=aw-exp-t"
    assert role_selector("aw-exp-t", "actor") == "app.kubernetes.io/instance=aw-exp-t,areal.io/role=actor"


def test_selector_labels_are_the_charts():
    helpers = HELPERS.read_text()
    assert f"{naming.LABEL_INSTANCE}: {{{{ .Release.Name | quote }}}}" in helpers
    assert f"{naming.LABEL_ROLE}: {{{{ .workload.name | quote }}}}" in helpers


@pytest.mark.parametrize(
    "value,expected",
    [
        ("actor/0", ("actor", 0)),
        ("rollout/12", ("rollout", 12)),
        ("a/b/3", ("a/b", 3)),
        ("proxy_rollout/7", ("proxy_rollout", 7)),
    ],
)
def test_parse_worker_id(value, expected):
    assert parse_worker_id(value) == expected
    assert parse_worker_id(worker_id(*expected)) == expected


@pytest.mark.parametrize(
    "value",
    ["actor", "actor/", "/0", "actor/x", "actor/-1", "actor/1.5", "", "actor/ 1", "actor/\u00b2", "actor/\u2460"],
)
def test_parse_worker_id_rejects(value):
    assert parse_worker_id(value) is None


def test_worker_id():
    assert worker_id("actor", 3) == "actor/3"


# --- names the chart and the filesystem accept ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "suggestion"),
    [("1abc", "aw-1abc"), ("a.b", "a-b"), ("Trial_1", "trial-1"), ("abc-", "abc")],
)
def test_release_names_helm_accepts_but_services_reject_are_refused_with_a_name_that_works(release, suggestion):
    problem = naming.release_name_problem(release)
    assert problem is not None and "DNS-1035" in problem and f"(e.g. {suggestion!r})" in problem
    assert naming.release_name_problem(suggestion) is None


def test_empty_and_over_long_release_names_are_refused():
    assert naming.release_name_problem("") == "the release name is empty"
    assert "at most 53" in naming.release_name_problem("a" * 54)


@pytest.mark.parametrize(("experiment", "trial"), [("GSM8K.grpo", "1"), ("a" * 80, "t/../x"), ("..", "..")])
def test_derived_release_names_are_always_valid(experiment, trial):
    assert naming.release_name_problem(naming.release_name(experiment, trial)) is None


@pytest.mark.parametrize("value", ["exp", "a..b", ".hidden", "trial 1", "名前"])
def test_one_directory_name_is_a_path_component(value):
    assert naming.path_component_problem("trial", value) is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [("", "non-empty"), (".", "outside"), ("..", "outside"), ("a/b", "path separator"), ("a\x00", "NUL")],
)
def test_names_that_are_not_one_directory_name_are_refused(value, reason):
    problem = naming.path_component_problem("trial", value)
    assert problem is not None and reason in problem


def test_a_selector_names_exactly_the_labels_given_and_the_role():
    labels = {naming.LABEL_NAME: "areal-workers", naming.LABEL_INSTANCE: "aw-x"}
    assert naming.selector(labels) == "app.kubernetes.io/instance=aw-x,app.kubernetes.io/name=areal-workers"
    assert naming.selector(labels, "actor").endswith(",areal.io/role=actor")


def test_the_charts_selector_labels_are_name_and_instance():
    helpers = HELPERS.read_text()
    block = helpers[helpers.index('define "areal-workers.selectorLabels"') :]
    block = block[: block.index("{{- end -}}")]
    assert f"{naming.LABEL_NAME}: " in block and f"{naming.LABEL_INSTANCE}: " in block
