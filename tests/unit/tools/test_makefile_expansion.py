"""The Makefile's recipes work on a fresh clone: make expands a whole recipe (and every `:=` at parse time) before
the recipe's first line runs, so a `$(shell ...)` or `$(wildcard ...)` that reads what an earlier line makes (the
virtualenv's python, .tools, the cluster's kubeconfig) sees nothing on a fresh clone. The first `make demo` failed
that way (`--kubeconfig ` with an empty argument); command substitutions that the shell runs when their line runs
(`$$(...)`) are the form that works. The fresh clone's `make demo` in the serial-node lane proves the recipes; this
catches the mistake in a second."""

from __future__ import annotations

import re

import pytest

from repo_paths import REPO

pytestmark = pytest.mark.unit

MAKEFILE = REPO / "Makefile"
EXPANDED_EARLY = re.compile(r"\$\((shell|wildcard|file|realpath|abspath)\s")


def lines_expanding_early(text: str) -> list[str]:
    return [line for line in text.splitlines() if EXPANDED_EARLY.search(line) and not line.lstrip().startswith("#")]


def test_no_make_function_reads_the_file_system_before_a_recipe_runs():
    assert lines_expanding_early(MAKEFILE.read_text()) == []


def test_the_check_catches_the_form_that_broke_the_first_demo():
    broken = "CLUSTER_KUBECONFIG = $(shell $(PY) tools/localcluster.py kubeconfig)\n\tmake $(wildcard .tools/*)"
    assert len(lines_expanding_early(broken)) == 2


def test_the_clusters_kubeconfig_is_read_when_its_line_runs():
    found = re.search(r"^CLUSTER_KUBECONFIG = (.+)$", MAKEFILE.read_text(), re.M)
    assert found and found.group(1).startswith('"$$(') and "localcluster.py kubeconfig" in found.group(1)
