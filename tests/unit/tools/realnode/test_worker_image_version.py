"""The real node's worker image is cached under its recipe's version (realnode.images.WORKER_IMAGE_VERSION), not under
a hash of its engines' bytes, so ruff formats those files like any other. What keeps the version honest: the
fingerprint of the sources recorded beside it, which must be theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from realnode import images
from realnode.images import (
    ENGINE_SOURCES,
    WORKER_IMAGE_SOURCES,
    WORKER_IMAGE_VERSION,
    sources_fingerprint,
    worker_image_name,
)

ENVIRONMENT = Path("/root/.cache/areal-workers/areal-worker/env")


def test_the_recorded_fingerprint_is_the_sources_so_a_change_bumps_the_version():
    found = sources_fingerprint(ENGINE_SOURCES)
    assert found == WORKER_IMAGE_SOURCES, (
        "the worker image's engines changed (realnode.images.ENGINE_SOURCES): a cached image would still hold the "
        f"old ones. In tools/realnode/images.py, bump WORKER_IMAGE_VERSION (now {WORKER_IMAGE_VERSION!r}) and set "
        f'WORKER_IMAGE_SOURCES = "{found}"'
    )


def test_every_source_is_in_the_repository():
    assert all(source.exists() for source in ENGINE_SOURCES.values()), ENGINE_SOURCES
    assert {"bandit_engines.py", "bandit_config.py", "localworker"} <= ENGINE_SOURCES.keys()


def test_the_archive_is_named_by_the_version_the_rootfs_and_the_environment(monkeypatch):
    name = worker_image_name("rootfs-bookworm-1234", ENVIRONMENT)
    assert name.startswith(f"areal-worker-v{WORKER_IMAGE_VERSION}-") and name.endswith(".tar")
    assert worker_image_name("rootfs-bookworm-1234", ENVIRONMENT) == name
    assert worker_image_name("rootfs-bookworm-5678", ENVIRONMENT) != name
    assert worker_image_name("rootfs-bookworm-1234", ENVIRONMENT / "other") != name
    monkeypatch.setattr(images, "WORKER_IMAGE_VERSION", f"{WORKER_IMAGE_VERSION}.1")
    assert worker_image_name("rootfs-bookworm-1234", ENVIRONMENT) != name


def test_the_sources_bytes_do_not_name_the_archive(monkeypatch, tmp_path):
    engines = tmp_path / "engines.py"
    engines.write_text("X = 1\n")
    monkeypatch.setattr(images, "ENGINE_SOURCES", {"engines.py": engines})
    name = worker_image_name("rootfs", ENVIRONMENT)
    engines.write_text("X = 2\n")
    assert worker_image_name("rootfs", ENVIRONMENT) == name


@pytest.mark.parametrize("change", ["content", "new file", "renamed", "in-image name"])
def test_the_fingerprint_follows_every_file_and_name_of_the_image(tmp_path, change):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""pkg"""\n')
    (package / "sub" / "mod.py").write_text("X = 1\n")
    single = tmp_path / "single.py"
    single.write_text("Y = 1\n")
    sources = {"pkg": package, "single.py": single}
    before = sources_fingerprint(sources)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")  # not copied into the image
    assert sources_fingerprint(sources) == before
    if change == "content":
        (package / "sub" / "mod.py").write_text("X = 2\n")
    elif change == "new file":
        (package / "sub" / "other.py").write_text("")
    elif change == "renamed":
        (package / "sub" / "mod.py").rename(package / "sub" / "mod2.py")
    else:
        sources = {"pkg2": package, "single.py": single}
    assert sources_fingerprint(sources) != before
