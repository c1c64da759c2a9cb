"""The write-or-check step every docs generator ends with (docgen.chart, docgen.config, docgen.cli)."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(files: dict[Path, str], check: bool, tool: str, regenerate: str, repo: Path) -> int:
    """With `check`: exit status 1 when a file differs from its generated text (nothing written); else writes the
    files that differ."""
    stale = [path for path, text in files.items() if not path.is_file() or path.read_text() != text]
    for path in stale:
        if check:
            print(f"{tool}: {path.relative_to(repo)} is out of date; run {regenerate}", file=sys.stderr)
        else:
            path.write_text(files[path])
            print(f"{tool}: wrote {path.relative_to(repo)}")
    return 1 if check and stale else 0
