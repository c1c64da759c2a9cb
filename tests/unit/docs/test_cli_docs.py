"""docs/en/cli.md and docs/zh/cli.md are what tools/docgen/cli.py generates from the command's parser."""

from __future__ import annotations

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
