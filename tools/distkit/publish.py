"""Pushing a release to an OCI registry: the packaged chart with helm (`oci://REGISTRY/charts/areal-workers:VERSION`)
and image archives with crane (`REGISTRY/areal-workers/NAME:VERSION`).

Credentials go to files of this run's own (helm's registry config, crane's docker config), never to the user's; a
registry whose certificate a private CA signed is trusted through `ca_file`, for helm by its flag and for crane by
SSL_CERT_FILE (Go reads it on Linux).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from distkit.artifacts import ReleaseError, release_version, run
from distkit.images import REAPER, reaper_archive_name
from repo_paths import TOOLS_BIN

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Registry:
    address: str  # host[:port][/path], without a scheme
    username: str | None = None
    password: str | None = None
    ca_file: Path | None = None


def _run(argv: list[str], what: str, env: dict[str, str], stdin: str | None = None) -> str:
    result = run(argv, what, env=env, stdin=stdin)
    return result.stdout + result.stderr


def _digest(output: str, what: str) -> str:
    found = DIGEST.findall(output)
    if not found:
        raise ReleaseError(f"{what} printed no digest:\n{output}")
    return found[-1]


class Publisher:
    """One push session: logged in once, with configuration files in a directory of its own."""

    def __init__(self, registry: Registry, workdir: Path) -> None:
        self.registry = registry
        self.helm_config = workdir / "helm-registry.json"
        self.env = {**os.environ, "DOCKER_CONFIG": str(workdir / "docker")}
        if registry.ca_file is not None:
            bundle = workdir / "ca-bundle.crt"
            system = Path("/etc/ssl/certs/ca-certificates.crt")
            bundle.write_text((system.read_text() if system.exists() else "") + registry.ca_file.read_text())
            self.env["SSL_CERT_FILE"] = str(bundle)
        if registry.username is not None:
            self._login()

    def _helm_tls(self) -> list[str]:
        return ["--ca-file", str(self.registry.ca_file)] if self.registry.ca_file else []

    def _login(self) -> None:
        host = self.registry.address.split("/")[0]
        user, password = self.registry.username or "", self.registry.password or ""
        helm = [str(TOOLS_BIN / "helm"), "registry", "login", host, "--registry-config", str(self.helm_config)]
        helm += ["--username", user, "--password-stdin", *self._helm_tls()]
        _run(helm, "helm registry login", self.env, password)
        crane = [str(TOOLS_BIN / "crane"), "auth", "login", host, "--username", user, "--password-stdin"]
        _run(crane, "crane auth login", self.env, password)

    def push_chart(self, archive: Path) -> tuple[str, str]:
        """(reference, digest) of the pushed chart: `oci://REGISTRY/charts/areal-workers` at the archive's version."""
        repository = f"oci://{self.registry.address}/charts"
        argv = [str(TOOLS_BIN / "helm"), "push", str(archive), repository, "--registry-config", str(self.helm_config)]
        output = _run([*argv, *self._helm_tls()], f"helm push {archive.name}", self.env)
        return f"{repository}/areal-workers", _digest(output, "helm push")

    def push_image(self, archive: Path, name: str, tag: str) -> tuple[str, str]:
        """(reference, digest) of an image archive (docker-archive tar) pushed as REGISTRY/areal-workers/NAME:TAG."""
        reference = f"{self.registry.address}/areal-workers/{name}:{tag}"
        output = _run([str(TOOLS_BIN / "crane"), "push", str(archive), reference], f"crane push {reference}", self.env)
        return reference, _digest(output, "crane push")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", required=True, help="HOST[:PORT][/PATH] of the OCI registry")
    parser.add_argument("--username", help="log in as this user; the password is read from standard input")
    parser.add_argument("--ca-file", type=Path, help="CA that signed the registry's certificate (else the system's)")
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="NAME=ARCHIVE",
        help="also push this image archive (docker-archive tar) as REGISTRY/areal-workers/NAME:VERSION",
    )


def push_from_arguments(args: argparse.Namespace) -> str:
    version = release_version()
    chart = args.out / f"areal-workers-{version}.tgz"
    if not chart.exists():
        raise ReleaseError(f"{chart} does not exist: run `python -m distkit build` (make release) first")
    images = []
    reaper = args.out / reaper_archive_name(version)
    if reaper.exists():
        images.append((REAPER, reaper))
    for item in args.image:
        name, equals, archive = item.partition("=")
        if not equals or not name or not Path(archive).is_file():
            raise ReleaseError(f"--image {item}: write NAME=ARCHIVE with an existing docker-archive tar")
        images.append((name, Path(archive)))
    password = sys.stdin.read().strip() if args.username else None
    with tempfile.TemporaryDirectory() as workdir:
        publisher = Publisher(Registry(args.registry, args.username, password, args.ca_file), Path(workdir))
        lines = ["{} {}".format(*publisher.push_chart(chart))]
        lines += ["{} {}".format(*publisher.push_image(archive, name, version)) for name, archive in images]
    return "\n".join(lines)
