"""docs/en/architecture.md and docs/zh/architecture.md name every module of the adapter by its path under
adapter/areal_workers/ (package __init__.py and __main__.py files aside), and name no module that is not there: a
module added, moved or removed fails here until the page says so."""

from __future__ import annotations

import re

import pytest

from docslib import DOCS, INLINE_CODE, LANGUAGES, REPO, parse

PACKAGE = REPO / "adapter" / "areal_workers"
MODULES = sorted(
    path.relative_to(PACKAGE).as_posix()
    for path in PACKAGE.rglob("*.py")
    if path.name not in ("__init__.py", "__main__.py")
)
MODULE_PATH = re.compile(r"^[a-z_]+(?:/[a-z_]+)*\.py$")


def page(lang: str) -> str:
    return (DOCS / lang / "architecture.md").read_text()


def named(module: str, text: str) -> bool:
    """`module` appears as a whole path: `client.py` inside `release/client.py` does not name a top-level client.py."""
    return re.search(rf"(?<![\w/.]){re.escape(module)}(?![\w/])", text) is not None


def test_the_package_has_modules_in_packages():
    assert "scheduler.py" in MODULES and "orchestration/driver.py" in MODULES and "cli/doctor/run.py" in MODULES


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_architecture_page_names_every_module(lang):
    text = page(lang)
    missing = [module for module in MODULES if not named(module, text)]
    assert not missing, f"docs/{lang}/architecture.md does not name {missing} (paths under adapter/areal_workers/)"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_module_the_architecture_page_names_exists(lang):
    """Module paths in inline code, outside tests/ and tools/: the page's tables and prose, not the diagram."""
    spans = [
        match.group(0).strip("`")
        for line in parse(DOCS / lang / "architecture.md").prose
        for match in INLINE_CODE.finditer(line)
    ]
    paths = {span for span in spans if MODULE_PATH.match(span) and not span.startswith(("tests/", "tools/", "test_"))}
    stale = sorted(path for path in paths if not (PACKAGE / path).is_file())
    assert not stale, f"docs/{lang}/architecture.md names modules that do not exist: {stale}"


def test_a_module_is_named_by_its_whole_path():
    assert named("release/client.py", "| `release/client.py` | Releases |")
    assert not named("client.py", "| `release/client.py` | Releases |")
    assert not named("release/client.py", "`release/client.pyc`")
