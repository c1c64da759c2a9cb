"""Writes the sha256 of every pinned package into a requirements file, for `pip install --require-hashes`.

    python tools/install/pin_hashes.py tools/install/areal-worker-requirements.txt

pip itself picks the files (`pip install --dry-run --report`, no download of the packages: the index's metadata),
for the interpreter and platform this runs on, so run it with the Python the file is for (CPython 3.11, Linux
x86-64 for the AReaL environment). Comments and the order of the file are kept; hashes already there are replaced.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(text: str) -> list[str]:
    """The file's logical lines: a requirement with its `\\`-continued hash lines joined, hashes dropped."""
    lines: list[str] = []
    for raw in re.sub(r"\\\n", " ", text).splitlines():
        lines.append(re.sub(r"\s+--hash=\S+", "", raw).rstrip())
    return lines


def selected_hashes(pins: str) -> dict[str, str]:
    """sha256 per normalized package name, of the file pip selects for each pin."""
    with tempfile.TemporaryDirectory() as work:
        requirements, report = Path(work, "requirements.txt"), Path(work, "report.json")
        requirements.write_text(pins)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet",
             "--report", str(report), "-r", str(requirements)],
            check=True,
        )  # fmt: skip
        installs = json.loads(report.read_text())["install"]
    return {
        normalized(item["metadata"]["name"]): item["download_info"]["archive_info"]["hashes"]["sha256"]
        for item in installs
    }


def main(path: str) -> int:
    file = Path(path)
    lines = requirement_lines(file.read_text())
    pins = "\n".join(line for line in lines if PIN.match(line)) + "\n"
    hashes = selected_hashes(pins)
    out: list[str] = []
    for line in lines:
        match = PIN.match(line)
        if match is None:
            out.append(line)
            continue
        digest = hashes.get(normalized(match.group(1)))
        if digest is None:
            raise SystemExit(f"pip selected no file for {line!r}")
        out.append(f"{line} \\\n    --hash=sha256:{digest}")
    file.write_text("\n".join(out) + "\n")
    print(f"{file}: {len(hashes)} hashes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
