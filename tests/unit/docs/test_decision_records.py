"""The design records are numbered: every section of decisions.md is `## D<n>. Title` and every section of
decisions-local-cluster.md `## L<n>. Title`, numbered from 1 without a gap, the same numbers in both languages. Links
and comments cite a record by its number, so a record keeps it: a new one takes the next."""

from __future__ import annotations

import re

import pytest

from docslib import DOCS, LANGUAGES, parse

RECORDS = {"decisions.md": "D", "decisions-local-cluster.md": "L"}


def _numbers(lang: str, page: str, prefix: str) -> list[int]:
    numbers = []
    for heading in parse(DOCS / lang / page).headings:
        if heading.level != 2:
            continue
        match = re.fullmatch(rf"{prefix}(\d+)\. \S.*", heading.text)
        assert match, f"docs/{lang}/{page}:{heading.line}: a record's heading is `## {prefix}<n>. Title`"
        numbers.append(int(match[1]))
    return numbers


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page,prefix", RECORDS.items())
def test_records_are_numbered_from_one_without_a_gap(lang, page, prefix):
    numbers = _numbers(lang, page, prefix)
    assert numbers == list(range(1, len(numbers) + 1)), f"docs/{lang}/{page}: {prefix} numbers {numbers}"


@pytest.mark.parametrize("page,prefix", RECORDS.items())
def test_both_languages_number_the_same_records(page, prefix):
    assert _numbers("en", page, prefix) == _numbers("zh", page, prefix)
