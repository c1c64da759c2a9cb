"""docs/en/cli.md and docs/zh/cli.md are what tools/docgen/cli.py generates from the command's parser."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from repo_paths import REPO


def test_the_cli_reference_is_up_to_date():
    done = subprocess.run(
        [sys.executable, "-m", "docgen.cli", "--check"], capture_output=True, text=True, cwd=REPO / "tools"
    )
    assert done.returncode == 0, done.stderr


def test_every_command_and_exit_code_is_documented_in_both_languages():
    from areal_workers.cli.main import build_parser
    from areal_workers.cli.session import EXIT_CODES

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for language in ("en", "zh"):
        page = (REPO / "docs" / language / "cli.md").read_text()
        for name in commands:
            assert f"\n### {name}\n" in page
        for code in EXIT_CODES:
            assert f"\n| {code} | " in page


def shown_commands() -> list[tuple[str, str]]:
    """(page, command) for every `areal-workers ...` line of a fenced block in the English pages, transcripts'
    `$ ` lines and cli.md's examples included (test_docs_commands runs the bash blocks' on the cluster; these are
    the rest, and all of them must at least be commands the parser takes)."""
    pages = [REPO / "README.md", REPO / "charts" / "areal-workers" / "README.md", *(REPO / "docs" / "en").glob("*.md")]
    found = []
    for page in pages:
        for language, block in re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), re.S | re.M):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = line.strip()
                if not (language == "bash" or line.startswith("$ ") or page.name == "cli.md"):
                    continue  # a program's output, not a command
                line = re.sub(r"\s+#\s.*$", "", line.removeprefix("$ "))
                line = re.split(r" \| | > |\)", line)[0]  # the command, not where its output goes
                line = re.split(r"\s{2,}", line.strip())[0]  # cli.md's examples: command, then what it does
                for prefix in (".venv/bin/areal-workers ", "areal-workers "):
                    if line.startswith(prefix) and "[-h]" not in line:  # not a usage synopsis
                        found.append((str(page.relative_to(REPO)), line.removeprefix(prefix)))
    return found


def test_every_areal_workers_command_the_docs_show_is_one_the_parser_takes(capsys):
    from areal_workers.cli.main import build_parser

    shown = shown_commands()
    assert len(shown) > 20  # the README's transcript, the guides' commands and cli.md's examples
    refused = []
    for page, command in shown:
        try:
            build_parser().parse_args(shlex.split(command))
        except SystemExit as error:
            if error.code:  # --help and --version exit 0
                refused.append(f"{page}: areal-workers {command}: {capsys.readouterr().err.strip().splitlines()[-1]}")
    assert refused == []
