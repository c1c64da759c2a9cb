"""python -m distkit build|push: `make release`'s steps (see the Makefile's `release` target)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from distkit import artifacts, publish
from repo_paths import REPO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m distkit", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the artifacts go (default: dist/)")
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("build", help="build and check the wheel, the sdist, the packaged chart and the reaper image")
    push = steps.add_parser("push", help="push the packaged chart and the reaper image of --out to an OCI registry")
    publish.add_arguments(push)
    args = parser.parse_args(argv)
    try:
        if args.step == "build":
            for path in artifacts.build(args.out):
                print(path)
        else:
            print(publish.push_from_arguments(args))
    except artifacts.ReleaseError as error:
        print(f"distkit: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
