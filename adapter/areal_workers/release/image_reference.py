"""Container image references as the kubelet parses them: what is wrong with one and what to write instead, and
a valid one as the chart's {repository, tag}. Pure functions (no cluster, no helm)."""

from __future__ import annotations

import re

# The image reference grammar of distribution/reference (what the kubelet and container runtimes parse):
#   reference := name [":" tag] ["@" digest]; name := [domain "/"] path-component ["/" path-component]*
# Character classes are spelled out: Go's \w is ASCII-only, Python's is not.
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_NAME = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_PATH_COMPONENT_RE = re.compile(_PATH_COMPONENT)
_DOMAIN_RE = re.compile(_DOMAIN)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_SHA256_HEX = re.compile(r"[a-f0-9]{64}")
MAX_NAME_LENGTH = 255
MAX_TAG_LENGTH = 128
_DIGEST_HELP = "copy it from `docker buildx imagetools inspect IMAGE` or `crane digest IMAGE`"


def image_reference_problem(image: str) -> str | None:
    """What is wrong with `image` as a container image reference and what to write instead; None when valid.

    The grammar is distribution/reference's, as the kubelet parses it (a bare 64-hex id is no name; the digest is
    checked as go-digest does: a registered algorithm with its exact length of lowercase hex). Only sha256 digests
    are accepted: the chart renders a digest back only when its tag value starts with "sha256:"."""
    if _SHA256_HEX.fullmatch(image):
        return "a bare 64-hex image id is not a pullable reference: write repository@sha256:<id>"
    rest, at, digest = image.partition("@")
    if at and (problem := _digest_problem(digest)):
        return problem
    name, tag = _split_tag(rest)
    if tag is not None and (problem := _tag_problem(name, tag, digest if at else None)):
        return problem
    return _name_problem(name, tag, digest if at else None)


def shown(text: str, limit: int = 80) -> str:
    """repr(text), shortened in the middle beyond `limit` characters."""
    return repr(text) if len(text) <= limit else f"{text[: limit // 2]!r}...{text[-(limit // 4) :]!r}"


def _split_tag(rest: str) -> tuple[str, str | None]:
    """'host:5000/a/b:tag' -> ('host:5000/a/b', 'tag'): the tag starts at the first ':' after the last '/'."""
    colon = rest.find(":", rest.rfind("/") + 1)
    return (rest, None) if colon < 0 else (rest[:colon], rest[colon + 1 :])


def _digest_problem(digest: str) -> str | None:
    if "@" in digest:
        return "it has more than one '@': a reference is name[:tag][@sha256:<64 hex digits>]"
    if not digest:
        return "nothing follows '@': write @sha256:<64 hex digits> or drop the '@'"
    algorithm, colon, encoded = digest.partition(":")
    if algorithm == "sha256" and colon:
        if _SHA256_HEX.fullmatch(encoded):
            return None
        what = "uppercase hex digits" if _SHA256_HEX.fullmatch(encoded.lower()) else f"{len(encoded)} characters"
        return (
            f"a sha256 digest is 64 lowercase hex digits, got {what} ({shown(encoded)}): write the full "
            f"digest; {_DIGEST_HELP}"
        )
    if not colon or not _DIGEST.fullmatch(digest):
        return f"the digest {shown(digest)} is not <algorithm>:<hex>: write @sha256:<64 hex digits>; {_DIGEST_HELP}"
    if algorithm in ("sha384", "sha512"):
        return f"the chart renders only sha256 digests, got {algorithm}: use the image's sha256 digest; {_DIGEST_HELP}"
    return f"unknown digest algorithm {shown(algorithm)}: use the image's sha256 digest; {_DIGEST_HELP}"


def _tag_problem(name: str, tag: str, digest: str | None) -> str | None:
    suffix = f"@{digest}" if digest is not None else ""
    if not tag:
        return f"the tag after ':' is empty: name a tag ({name}:v1.0.4{suffix}) or drop the ':'"
    if ":" in tag:
        return (
            "it has more than one ':' after the last '/': a reference is name[:tag][@digest], and a ':' before "
            f"the first '/' is a registry port; use {name}:{tag.split(':', 1)[0]}{suffix}"
        )
    if len(tag) > MAX_TAG_LENGTH:
        return f"the tag is {len(tag)} characters, at most {MAX_TAG_LENGTH} are allowed: use a shorter tag or a digest"
    if not _TAG.fullmatch(tag):
        return (
            f"the tag {shown(tag)} may hold only letters, digits, '_', '.' and '-', and must not start with "
            "'.' or '-': fix the tag"
        )
    return None


def _name_problem(name: str, tag: str | None, digest: str | None) -> str | None:
    if not name:
        return (
            "there is no repository name before the tag or digest: write the image's repository first, e.g. "
            "ghcr.io/inclusionai/areal-runtime:v1.0.4"
        )
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"the repository name is {len(name)} characters, at most {MAX_NAME_LENGTH} are allowed: use a shorter "
            "repository path"
        )
    if _NAME.fullmatch(name):
        return None
    components = name.split("/")
    if name.endswith("/"):
        return f"the repository name ends with '/': drop it ({name.rstrip('/')})"
    if "" in components:
        return f"the repository name has an empty path component ('//'): use {re.sub('/+', '/', name)}"
    domain = components[0] if len(components) > 1 and _is_domain(components[0]) else None
    if domain is not None and not _DOMAIN_RE.fullmatch(domain):
        return (
            f"the registry {shown(domain)} is not a host name or [IPv6] address with an optional :port: fix the "
            "registry part before the first '/'"
        )
    path = components[1:] if domain is not None else components
    if any(component != component.lower() for component in path):
        return "the repository path must be lowercase" + _lowercase_hint(components, tag, digest)
    bad = next((component for component in path if not _PATH_COMPONENT_RE.fullmatch(component)), name)
    return (
        f"the path component {shown(bad)} must be lowercase letters and digits, separated by one '.', one or two "
        "'_' or any number of '-': fix or remove the other characters"
    )


def _is_domain(first: str) -> bool:
    """Whether the first of several components names a registry (as the kubelet's reference parser decides)."""
    return first == "localhost" or any(c in first for c in ".:[") or first != first.lower()


def _lowercase_hint(components: list[str], tag: str | None, digest: str | None) -> str:
    """': use upper/case:1' when lowercasing the path (and a first component that only looks like a registry
    because of its case) gives a valid reference."""
    first = components[0]
    keep_first = len(components) > 1 and (first == "localhost" or any(c in first for c in ".:["))
    parts = [first, *(c.lower() for c in components[1:])] if keep_first else [c.lower() for c in components]
    candidate = "/".join(parts) + (f":{tag}" if tag is not None else "") + (f"@{digest}" if digest is not None else "")
    return f": use {candidate}" if image_reference_problem(candidate) is None else ""


def split_image(image: str) -> dict[str, str]:
    """A valid reference -> the chart's {repository, tag}, which its imageRef renders back to the same reference:
    'repository:tag', or 'repository@tag' when the tag is a "sha256:..." digest. 'name:tag@sha256:...' keeps its tag
    in the repository; a reference without tag or digest means ':latest' (the chart would otherwise fall back to
    the release's image tag)."""
    rest, at, digest = image.partition("@")
    if at:
        return {"repository": rest, "tag": digest}
    name, tag = _split_tag(rest)
    return {"repository": name, "tag": tag if tag is not None else "latest"}
