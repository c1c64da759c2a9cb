"""docs/en and docs/zh cover the same pages with the same structure, and every link in the docs resolves.

Per page pair (README.md and CONTRIBUTING.md at the root pair with docs/zh/README.md and docs/zh/CONTRIBUTING.md):
the same sequence of heading levels, the same code blocks (count and info strings, in order), and a Chinese page that
is a translation (it has Chinese prose). Links in both languages, the index docs/README.md and the root pages point at
files that exist, and at headings that exist when they carry an anchor. The index lists every page of both
languages. The two READMEs and the two CONTRIBUTING pages link each other at the top, and each leads to the
development page."""

from __future__ import annotations

import pytest

from docslib import (
    DOCS,
    INDEX,
    LANGUAGES,
    REPO,
    REQUIRED_PAGES,
    ROOT_PAGES,
    cjk_characters,
    documents,
    link_problem,
    pages,
    pairs,
    parse,
)

PAIRS = pairs()
PAIR_IDS = [name for name, _, _ in PAIRS]
MIN_CHINESE_CHARACTERS = 50


def _relative(path):
    return str(path.relative_to(REPO))


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_required_page_exists(lang):
    missing = [name for name in REQUIRED_PAGES if name not in pages(lang)]
    assert not missing, f"docs/{lang} lacks {missing}"


def test_both_languages_have_the_same_pages():
    english, chinese = set(pages("en")) | set(ROOT_PAGES), set(pages("zh"))
    assert english == chinese, (
        f"only in English: {sorted(english - chinese)}; only in Chinese: {sorted(chinese - english)}"
    )


@pytest.mark.parametrize("name,english,chinese", PAIRS, ids=PAIR_IDS)
def test_the_same_headings(name, english, chinese):
    if not chinese.is_file():
        pytest.fail(f"{_relative(chinese)} is missing")
    en, zh = parse(english).headings, parse(chinese).headings
    en_levels = [heading.level for heading in en]
    zh_levels = [heading.level for heading in zh]
    if en_levels != zh_levels:
        shown = "\n".join(
            f"  {'#' * a.level if a else '-':<6} {a.text if a else '':<50} | "
            f"{'#' * b.level if b else '-':<6} {b.text if b else ''}"
            for a, b in zip(en + [None] * (len(zh) - len(en)), zh + [None] * (len(en) - len(zh)))
        )
        pytest.fail(f"{name}: heading levels differ between {_relative(english)} and {_relative(chinese)}:\n{shown}")
    assert [h.level for h in en].count(1) == 1, f"{name}: one title (#) per page"


@pytest.mark.parametrize("name,english,chinese", PAIRS, ids=PAIR_IDS)
def test_the_same_code_blocks(name, english, chinese):
    if not chinese.is_file():
        pytest.fail(f"{_relative(chinese)} is missing")
    en = [(block.info, block.line) for block in parse(english).blocks]
    zh = [(block.info, block.line) for block in parse(chinese).blocks]
    assert [info for info, _ in en] == [info for info, _ in zh], (
        f"{name}: code blocks differ (info string, line):\n  en {en}\n  zh {zh}"
    )


@pytest.mark.parametrize("name,english,chinese", PAIRS, ids=PAIR_IDS)
def test_the_chinese_page_is_a_translation(name, english, chinese):
    if not chinese.is_file():
        pytest.fail(f"{_relative(chinese)} is missing")
    assert cjk_characters(parse(chinese)) >= MIN_CHINESE_CHARACTERS, f"{_relative(chinese)} has hardly any Chinese"


# Pages outside docs/ that the docs link to and that link back into them.
LINKED_READMES = [REPO / "charts" / "areal-workers" / "README.md", REPO / "rbac" / "README.md"]


@pytest.mark.parametrize("path", [*documents(), *LINKED_READMES], ids=_relative)
def test_links_resolve(path):
    problems = [
        f"line {link.line}: {problem}"
        for link in parse(path).links
        if (problem := link_problem(path, link.target)) is not None
    ]
    assert not problems, f"{_relative(path)}:\n  " + "\n  ".join(problems)


def test_the_index_lists_every_page_of_both_languages():
    linked = {
        (INDEX.parent / link.target.partition("#")[0]).resolve()
        for link in parse(INDEX).links
        if link.target and not link.target.startswith("#")
    }
    expected = {path.resolve() for lang in LANGUAGES for name, path in pages(lang).items()}
    expected |= {(REPO / name).resolve() for name in ROOT_PAGES}
    missing = sorted(str(path.relative_to(REPO)) for path in expected - linked)
    assert not missing, f"{INDEX.relative_to(REPO)} does not link {missing}"


def test_the_docs_directory_holds_only_the_two_languages_and_the_index():
    entries = sorted(path.name for path in DOCS.iterdir())
    assert entries == ["README.md", *LANGUAGES], entries


# The root README and CONTRIBUTING link their translations within their first lines, the translations link back, and
# each links the development page of its language (the contributor material lives there and in CONTRIBUTING, not in
# the README).
README_PAIR = [
    *((REPO / name, DOCS / "zh" / name, DOCS / "en" / "development.md") for name in ROOT_PAGES),
    *((DOCS / "zh" / name, REPO / name, DOCS / "zh" / "development.md") for name in ROOT_PAGES),
]
TOP_LINES = 5


@pytest.mark.parametrize("readme,other,development", README_PAIR, ids=lambda path: _relative(path))
def test_the_readmes_link_each_other_and_the_development_page(readme, other, development):
    def targets(links):
        return {
            (readme.parent / link.target.partition("#")[0]).resolve()
            for link in links
            if link.target and not link.target.startswith("#")
        }

    links = parse(readme).links
    assert other.resolve() in targets([link for link in links if link.line <= TOP_LINES]), (
        f"{_relative(readme)} does not link {_relative(other)} in its first {TOP_LINES} lines"
    )
    assert development.resolve() in targets(links), f"{_relative(readme)} does not link {_relative(development)}"
