"""The release's image: the reaper's (areal-workers and helm on python), built from the release's own wheel without
a container engine (realnode/images.py, the content images/reaper/Dockerfile describes) and checked before a push.

The worker and trainer images are AReaL's runtime image plus the user's code (images/worker, images/trainer): a user
builds them with their own builder; they are not this project's to publish."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from realnode.images import REAPER_LIB, reaper_image

REAPER = "reaper"  # pushed as REGISTRY/areal-workers/reaper:VERSION
REAPER_USER = "1000:1000"  # the chart's reaper runs as uid 1000 (runAsNonRoot)
REAPER_FILES = ("usr/local/bin/areal-workers", "usr/local/bin/helm")


def reaper_archive_name(version: str) -> str:
    return f"areal-workers-{REAPER}-{version}.tar"


def build_reaper(wheel: Path, out: Path, version: str) -> Path:
    """The reaper image of `wheel` as a docker-archive tar in `out`."""
    return reaper_image(wheel, out / reaper_archive_name(version))


def reaper_problems(config: dict, names: set[str], version: str) -> list[str]:
    """What is wrong with a reaper image, from its config and the paths of its layers."""
    problems = []
    container = config.get("config", {})
    if container.get("User") != REAPER_USER:
        problems.append(f"the reaper image runs as {container.get('User')!r}, not {REAPER_USER} (the chart's uid)")
    if f"PYTHONPATH={REAPER_LIB}" not in container.get("Env", []):
        problems.append(f"the reaper image's PYTHONPATH is not {REAPER_LIB}")
    missing = [name for name in REAPER_FILES if name not in names]
    if missing:
        problems.append(f"the reaper image lacks {', '.join(missing)}")
    dist_info = f"{REAPER_LIB.lstrip('/')}/areal_workers-{version}.dist-info/METADATA"
    if dist_info not in names:
        problems.append(f"the reaper image does not hold areal-workers {version} ({dist_info})")
    return problems


def archive_contents(archive: Path) -> tuple[dict, set[str]]:
    """(image config, every path of every layer) of a docker-archive tar."""
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))[0]
        config = json.load(outer.extractfile(manifest["Config"]))
        names: set[str] = set()
        for layer in manifest["Layers"]:
            with tarfile.open(fileobj=outer.extractfile(layer)) as inner:
                names.update(name.removeprefix("./") for name in inner.getnames())
    return config, names


def check_reaper(archive: Path, version: str) -> list[str]:
    config, names = archive_contents(archive)
    return reaper_problems(config, names, version)
