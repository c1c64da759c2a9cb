"""`make demo` installs only the tools its local cluster runs (the Makefile's DEMO_TOOLS): each is a tool tools.sh
knows, and none of the test-only ones is among them. That the list is enough is proved by the fresh clone's
`make demo` in the serial-node lane (tests/integration/test_demo.py): its .tools/bin links only these."""

from __future__ import annotations

import re

import pytest

from repo_paths import REPO

pytestmark = pytest.mark.unit

TEST_ONLY = {"helm4", "ct", "kubeconform", "helm_unittest", "kueue", "crane", "argocd"}


def makefile_demo_tools() -> list[str]:
    found = re.search(r"^DEMO_TOOLS := (.+)$", (REPO / "Makefile").read_text(), re.M)
    assert found, "the Makefile names the demo's tools in DEMO_TOOLS"
    return found.group(1).split()


def tools_sh_tools() -> list[str]:
    found = re.search(r"^all=\(([^)]*)\)", (REPO / "tools" / "install" / "tools.sh").read_text(), re.M)
    assert found
    return found.group(1).split()


def test_the_demo_asks_for_known_tools_in_the_install_order():
    every = tools_sh_tools()
    demo = makefile_demo_tools()
    assert set(demo) <= set(every), set(demo) - set(every)
    assert demo == [tool for tool in every if tool in demo]  # node_images starts beside the Go builds, as in `all`


def test_the_demo_leaves_out_what_only_the_tests_use():
    assert set(tools_sh_tools()) - set(makefile_demo_tools()) == TEST_ONLY
