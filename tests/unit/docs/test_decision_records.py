"""The design records are numbered: every section of decisions.md is `## D<n>. Title` and every section of
decisions-local-cluster.md `## L<n>. Title`, numbered from 1 without a gap, the same numbers in both languages. Links
and comments cite a record by its number, so a record keeps it: a new one takes the next. Each record opens with its
decision in one sentence (`**Decision.**`, `**决定。**`), before the situation and the reasons."""

from __future__ import annotations

import re

import pytest

from docslib import DOCS, LANGUAGES, parse

RECORDS = {"decisions.md": "D", "decisions-local-cluster.md": "L"}
DECISION = {"en": "**Decision.** ", "zh": "**决定。** "}


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


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", RECORDS)
def test_each_record_opens_with_its_decision(lang, page):
    lines = (DOCS / lang / page).read_text().splitlines()
    headings = [heading for heading in parse(DOCS / lang / page).headings if heading.level == 2]
    missing = [
        heading.text
        for heading in headings
        if not next((line for line in lines[heading.line :] if line.strip()), "").startswith(DECISION[lang])
    ]
    assert not missing, f"docs/{lang}/{page}: records that do not open with {DECISION[lang].strip()}: {missing}"
