"""Reading the documentation's Markdown for the docs tests: pages and their pairs across languages, headings, fenced
code blocks, links and the anchors GitHub gives headings. No Markdown library: the subset the docs use is small."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from repo_paths import REPO

DOCS = REPO / "docs"
LANGUAGES = ("en", "zh")
# The pages both languages must have. cli.md is generated from the CLI's argument parser by its own tool.
REQUIRED_PAGES = (
    "quickstart.md",
    "concepts.md",
    "areal-integration.md",
    "configuration.md",
    "cli.md",
    "rbac.md",
    "gitops.md",
    "troubleshooting.md",
    "security.md",
    "architecture.md",
    "decisions.md",
    "demo.md",
    "testing.md",
    "development.md",
)
INDEX = DOCS / "README.md"  # the index of both languages
# Pages at the root of the repository, where GitHub shows them; their Chinese pages are docs/zh/<name>.
ROOT_PAGES = ("README.md", "CONTRIBUTING.md")

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<text>.+?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target><[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(?P<target>\S+)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    line: int


@dataclass(frozen=True)
class Block:
    """A fenced code block: its info string (`yaml`, `bash`, ...; "" for none) and its lines, unindented."""

    path: Path
    line: int
    info: str
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


@dataclass(frozen=True)
class Link:
    target: str
    line: int


@dataclass
class Page:
    path: Path
    headings: list[Heading] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)  # lines outside code blocks

    @property
    def anchors(self) -> set[str]:
        return anchors(self.headings)


@cache
def parse(path: Path) -> Page:
    page = Page(path)
    fence: re.Match[str] | None = None
    body: list[str] = []
    start = 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if fence is not None:
            closing = FENCE.match(line)
            if (
                closing
                and closing["fence"][0] == fence["fence"][0]
                and len(closing["fence"]) >= len(fence["fence"])
                and not closing["info"]
            ):
                page.blocks.append(Block(path, start, fence["info"], tuple(_unindent(body, len(fence["indent"])))))
                fence = None
            else:
                body.append(line)
            continue
        opening = FENCE.match(line)
        if opening:
            fence, body, start = opening, [], number
            continue
        page.prose.append(line)
        heading = HEADING.match(line)
        if heading:
            page.headings.append(Heading(len(heading["hashes"]), heading["text"], number))
        for target in _links(line):
            page.links.append(Link(target, number))
    if fence is not None:
        raise AssertionError(f"{path.relative_to(REPO)}:{start}: code block never closed")
    return page


def _unindent(lines: list[str], indent: int) -> list[str]:
    """A fenced block's lines without the indentation of its opening fence (a block inside a list item)."""
    return [line[indent:] if line[:indent].strip() == "" else line.lstrip() for line in lines]


def _links(line: str) -> list[str]:
    code_free = INLINE_CODE.sub("", line)
    found = [match["target"].strip("<>") for match in LINK.finditer(code_free)]
    reference = REFERENCE.match(code_free)
    if reference:
        found.append(reference["target"])
    return found


def slug(text: str) -> str:
    """The anchor GitHub gives a heading: its text without Markdown, lowercased, punctuation dropped (letters of any
    script, digits, `_` and `-` stay), spaces turned into `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(headings: list[Heading]) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in headings:
        base = slug(heading.text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def pages(lang: str) -> dict[str, Path]:
    return {path.name: path for path in sorted((DOCS / lang).glob("*.md"))}


def pairs() -> list[tuple[str, Path, Path]]:
    """(name, English page, Chinese page) for every page of docs/en; README.md and CONTRIBUTING.md at the root pair
    with docs/zh/README.md and docs/zh/CONTRIBUTING.md."""
    zh = pages("zh")
    found = [(name, REPO / name, zh.get(name, DOCS / "zh" / name)) for name in ROOT_PAGES]
    found += [(name, path, zh.get(name, DOCS / "zh" / name)) for name, path in pages("en").items()]
    return found


def documents() -> list[Path]:
    """Every documentation file the docs tests read: both languages, the index and the root pages."""
    return [*(REPO / name for name in ROOT_PAGES), INDEX, *pages("en").values(), *pages("zh").values()]


def link_problem(page: Path, target: str) -> str | None:
    """Why a link of `page` does not resolve (None when it does): external links are not followed; a relative one
    must name an existing file or directory, and its anchor, if any, a heading of that Markdown file."""
    if EXTERNAL.match(target):
        return None
    path_part, _, anchor = target.partition("#")
    destination = (page.parent / path_part).resolve() if path_part else page.resolve()
    if not destination.exists():
        shown = destination.relative_to(REPO) if destination.is_relative_to(REPO) else destination
        return f"{target}: no such file {shown}"
    if anchor and destination.suffix == ".md":
        known = parse(destination).anchors
        if anchor not in known:
            return f"{target}: {destination.name} has no heading with the anchor #{anchor}"
    return None


CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


def cjk_characters(page: Page) -> int:
    return sum(len(CJK.findall(line)) for line in page.prose)
