"""The real node's images, built on this machine without a registry and imported into its containerd.

- `local/pause:dev`: the pod sandbox, one static binary (pause.c, beside this module).
- `local/areal-worker:dev`: a Debian bookworm rootfs (debootstrap, minbase plus python3 for the chart's `helm test`
  Pod; g++ and openssl, which AReaL's runtime image has too: AReaL compiles some of its functions with torch.compile,
  whose CPU backend builds C++ and checksums its sources with openssl) and a small layer with this repository's CPU
  engines on PYTHONPATH. AReaL's environment (torch: ~7 GB) is not in the image: worker pods mount the cached
  environment and its interpreter read-only from the host at their host paths (values.worker_values), so the image is
  ~400 MB and builds once.
- `local/areal-workers-reaper:dev`: a rootfs of minbase plus python3, this package with its dependencies, and helm
  (`reaper_image`).

Each image is written as a docker-archive tar (manifest.json, config, one gzip-compressed tar per layer) under the tool
cache, named by what goes into it, so a second build is a file lookup: the pause image by a hash of its source and
compiler; the worker image by its recipe's version, WORKER_IMAGE_VERSION (bumped by hand when its engines or config
change, so the engines are formatted like any other Python file), and a hash of its rootfs's packages and the
environment's path. `ctr images import` takes it, and `crane push` sends its layers as they are: compressed once here,
not again on every push (an uncompressed layer is gzipped twice per push, for its digest and for the upload, on one
core: a minute for the worker image).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from localkube.settings import ClusterError
from repo_paths import LOCALWORKER_PATH, REPO, TOOLS_BIN

CACHE = Path(os.environ.get("AREAL_WORKERS_CACHE") or Path.home() / ".cache" / "areal-workers") / "images"
PAUSE_SOURCE = Path(__file__).resolve().parent / "pause.c"
PAUSE_IMAGE = "local/pause:dev"
WORKER_IMAGE = "local/areal-worker:dev"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
WORKER_PACKAGES = ("python3", "g++", "openssl")
REAPER_PACKAGES = ("python3",)
# In-image directory of the engines layer; on the workers' PYTHONPATH.
ENGINES_DIR = "/opt/areal-workers/python"
# The worker image's recipe: the files its engines layer holds (ENGINE_SOURCES, in-image path under ENGINES_DIR ->
# repository path) and its config (worker_image). WORKER_IMAGE_VERSION names it in the image's cache key, so bump it
# when either changes, and record the new sources' fingerprint in WORKER_IMAGE_SOURCES:
# tests/unit/tools/realnode/test_worker_image_version.py fails, printing it, while they disagree.
WORKER_IMAGE_VERSION = "2"
WORKER_IMAGE_SOURCES = "d7da7773199fa6a5"
ENGINE_SOURCES = {
    "bandit_engines.py": REPO / "examples" / "bandit_demo" / "bandit_engines.py",
    "bandit_config.py": REPO / "examples" / "bandit_demo" / "bandit_config.py",  # the config /configure rebuilds
    "localworker": LOCALWORKER_PATH / "localworker",  # the stand-in worker server and the tests' engines
}
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REAPER_IMAGE = "local/areal-workers-reaper:dev"
REAPER_LIB = "/opt/areal-workers/lib"  # the package and its dependencies (pip --target), on PYTHONPATH
CONSTRAINTS = REPO / "tools" / "install" / "dev-constraints.txt"  # the versions the tests run with
REAPER_LAUNCHER = """#!/usr/bin/python3
import sys

from areal_workers.cli.main import main

sys.exit(main())
"""


# In every archive's cache key: archives written before layers were compressed are not reused.
ARCHIVE_FORMAT = b"docker-archive, gzip layers"


@dataclass(frozen=True)
class Layer:
    tar: Path
    diff_id: str  # sha256 of the uncompressed tar
    blob: Path  # the tar, gzip-compressed: what the archive holds and a registry stores


def gzipped(tar: Path) -> Path:
    """`tar`.gz beside it, written once; reproducible (no name, no time in the header); level 1, as the blob is
    compressed for transfer, not for storage."""
    blob = tar.with_name(f"{tar.name}.gz")
    if not blob.exists():
        partial = blob.with_name(f"{blob.name}.partial")
        with tar.open("rb") as source, partial.open("wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", compresslevel=1, fileobj=raw, mtime=0) as target:
                shutil.copyfileobj(source, target, 1 << 20)
        partial.rename(blob)
    return blob


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise ClusterError(f"{what} failed ({' '.join(argv[:3])} ...):\n{tail}")


def _tree_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def sources_fingerprint(sources: dict[str, Path]) -> str:
    """A sha256 prefix of the files `sources` names (in-image path -> repository file or directory): each file's path
    in the image and its bytes."""
    digest = hashlib.sha256()
    for name, source in sorted(sources.items()):
        for file in _tree_files(source):
            inner = PurePosixPath(name, *file.relative_to(source).parts) if source.is_dir() else PurePosixPath(name)
            digest.update(f"{inner}\0".encode() + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _hash_sources(*parts: bytes | Path) -> str:
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            for file in _tree_files(part):
                digest.update(str(file.relative_to(REPO)).encode() + b"\0" + file.read_bytes())
        else:
            digest.update(part)
    return digest.hexdigest()[:16]


def docker_archive(out: Path, tag: str, layers: list[Layer], config: dict) -> Path:
    """Writes a docker-archive tar of `layers` (bottom first) with the container `config` (Env, Entrypoint, ...)."""
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer.diff_id}" for layer in layers]},
        "history": [{"created_by": f"tools/realnode/images.py layer {i}"} for i in range(len(layers))],
    }
    config_bytes = json.dumps(image_config, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [
        {"Config": config_name, "RepoTags": [tag], "Layers": [f"{layer.diff_id}/layer.tar.gz" for layer in layers]}
    ]
    partial = out.with_suffix(".partial")
    with tarfile.open(partial, "w") as archive:
        for layer in layers:
            archive.add(layer.blob, arcname=f"{layer.diff_id}/layer.tar.gz")
        for name, data in ((config_name, config_bytes), ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    partial.rename(out)
    return out


def _layer_of_dir(root: Path, out: Path) -> Layer:
    _run(
        [
            "tar",
            "--numeric-owner",
            "--sort=name",
            "--mtime=@0",
            "--exclude=./dev/*",
            "--exclude=./proc/*",
            "--exclude=./sys/*",
            "-C",
            str(root),
            "-cf",
            str(out),
            ".",
        ],
        f"packing {root}",
    )
    return Layer(out, _sha256(out), gzipped(out))


def pause_image() -> Path:
    """The sandbox image's archive, built when its source or compiler changed."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ClusterError("gcc is missing: the real node's pause image is compiled here (apt-get install gcc)")
    compiler = subprocess.run([gcc, "--version"], capture_output=True, text=True).stdout.encode()
    out = CACHE / f"pause-{_hash_sources(ARCHIVE_FORMAT, PAUSE_SOURCE, compiler)}.tar"
    if out.exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        root = Path(tmp) / "rootfs"
        root.mkdir()
        _run([gcc, "-static", "-Os", "-s", "-o", str(root / "pause"), str(PAUSE_SOURCE)], "compiling pause.c")
        layer = _layer_of_dir(root, Path(tmp) / "layer.tar")
        return docker_archive(out, PAUSE_IMAGE, [layer], {"Entrypoint": ["/pause"]})


def debian_rootfs(packages: tuple[str, ...]) -> Path:
    """A Debian rootfs of minbase and `packages`, made by debootstrap once (2 to 4 minutes; its packages come from
    Debian's mirror)."""
    key = _hash_sources(f"{DEBIAN_SUITE} {DEBIAN_MIRROR} {' '.join(packages)}".encode())
    root = CACHE / f"rootfs-{DEBIAN_SUITE}-{key}"
    if (root / ".complete").exists():
        return root
    if shutil.which("debootstrap") is None:
        raise ClusterError("debootstrap is missing: apt-get install debootstrap (the worker image's rootfs)")
    _unmount_below(root)  # an interrupted debootstrap leaves its /proc and /sys mounted in the target
    shutil.rmtree(root, ignore_errors=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            DEBIAN_SUITE,
            str(root),
            DEBIAN_MIRROR,
        ],
        f"debootstrap of {DEBIAN_SUITE}",
    )
    shutil.rmtree(root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
    # Workers run as uid 1000 and reach the environment mounted under /root (its host path) through it.
    (root / "root").chmod(0o755)
    (root / ".complete").write_text("")
    return root


def base_layer(packages: tuple[str, ...]) -> Layer:
    """The Debian rootfs of `packages` as a layer tar and its gzip, packed once."""
    rootfs = debian_rootfs(packages)
    tar = CACHE / f"{rootfs.name}.layer.tar"
    if not tar.exists():
        _layer_of_dir(rootfs, tar.with_suffix(".partial")).tar.rename(tar)
    return Layer(tar, _sha256(tar), gzipped(tar))


def _unmount_below(root: Path) -> None:
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)


def worker_image_name(rootfs: str, environment: Path) -> str:
    """The worker image archive's name in the cache: the recipe's version, and a hash of the archive format, the
    rootfs (its suite, mirror and packages) and the path of `environment`, which the image's PATH names."""
    key = _hash_sources(ARCHIVE_FORMAT, WORKER_IMAGE_VERSION.encode(), rootfs.encode(), str(environment).encode())
    return f"areal-worker-v{WORKER_IMAGE_VERSION}-{key}.tar"


def worker_image(environment: Path) -> Path:
    """The worker image's archive: the Debian rootfs layer and the engines layer; PATH starts with the bin/ of
    `environment` (AReaL's virtualenv, mounted from the host at that path)."""
    environment = environment.resolve()
    rootfs = debian_rootfs(WORKER_PACKAGES)
    out = CACHE / worker_image_name(rootfs.name, environment)
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        base = base_layer(WORKER_PACKAGES)
        engines_root = Path(tmp) / "engines"
        target = engines_root / ENGINES_DIR.lstrip("/")
        target.mkdir(parents=True)
        for name, source in ENGINE_SOURCES.items():
            if source.is_dir():
                shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, target / name)
        layer = _layer_of_dir(engines_root, Path(tmp) / "engines.tar")
        config = {
            "Env": [f"PATH={environment}/bin:{BASE_PATH}", f"PYTHONPATH={ENGINES_DIR}"],
            "WorkingDir": "/tmp",
            "Cmd": ["python3"],
        }
        return docker_archive(out, WORKER_IMAGE, [base, layer], config)


def reaper_image(wheel: Path, out: Path) -> Path:
    """The reaper image's archive at `out` (images/reaper/Dockerfile's content, built without a container engine):
    the Debian rootfs layer (its python3 is 3.11, the package's) and a layer with `wheel` and its pinned dependencies
    installed under REAPER_LIB, helm, and an `areal-workers` command; runs as uid 1000. Not cached: every wheel is
    a new build (seconds; the rootfs layer is cached)."""
    helm = (TOOLS_BIN / "helm").resolve()
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        root = Path(tmp) / "reaper"
        lib, bin_dir = root / REAPER_LIB.lstrip("/"), root / "usr" / "local" / "bin"
        bin_dir.mkdir(parents=True)
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(lib)]
        _run([*pip, "-c", str(CONSTRAINTS), str(wheel)], f"installing {wheel.name} into the reaper image")
        shutil.rmtree(lib / "bin", ignore_errors=True)  # console scripts with this machine's interpreter path
        shutil.copy2(helm, bin_dir / "helm")
        launcher = bin_dir / "areal-workers"
        launcher.write_text(REAPER_LAUNCHER)
        launcher.chmod(0o755)
        layer = _layer_of_dir(root, Path(tmp) / "reaper.tar")
        config = {
            "Env": [f"PATH={BASE_PATH}", f"PYTHONPATH={REAPER_LIB}"],
            "WorkingDir": "/tmp",
            "User": "1000:1000",
            "Cmd": ["areal-workers", "reap"],
        }
        return docker_archive(out, REAPER_IMAGE, [base_layer(REAPER_PACKAGES), layer], config)


if __name__ == "__main__":
    # `make tools` builds the slow parts ahead (the worker image's own layer needs AReaL's environment: at `up`).
    print(pause_image())
    for packages in (WORKER_PACKAGES, REAPER_PACKAGES):
        print(base_layer(packages).tar)
