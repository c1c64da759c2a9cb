"""The trainer's environment in its Job: a submit file's `env` entry is a literal value or a key of a Secret or a
ConfigMap of the namespace, which the Job then references (`valueFrom`) instead of holding it, so a token never
appears in the Job's spec; `--env-from-secret NAME=SECRET:KEY` and `--env-from-configmap NAME=CONFIGMAP:KEY` add such
references on the command line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import InputError

# A submit file's env value from a key of a Secret or a ConfigMap: the field of Kubernetes' EnvVarSource, what it reads.
ENV_SOURCES = {"secretKeyRef": "Secret", "configMapKeyRef": "ConfigMap"}
ENV_REFERENCE_FIELDS = ("name", "key", "optional")
DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a key of a Secret's or ConfigMap's data
ENV_EXAMPLE = "e.g. X: {secretKeyRef: {name: SECRET, key: KEY}}, or X: {configMapKeyRef: {name: CONFIGMAP, key: KEY}}"


def _env_reference(name: str, value: dict[str, Any], where: str) -> dict[str, Any]:
    """`{secretKeyRef: {...}}`, `{configMapKeyRef: {...}}` (or either under `valueFrom:`, as Kubernetes writes it),
    checked: one source, its name and key, optionally `optional`."""
    value = value["valueFrom"] if set(value) == {"valueFrom"} and isinstance(value["valueFrom"], dict) else value
    example = ENV_EXAMPLE.replace("X:", f"{name}:")
    if len(value) != 1 or next(iter(value)) not in ENV_SOURCES:
        raise InputError(
            f"{where}: env.{name}: a mapping names one of {', '.join(ENV_SOURCES)} (a key of a Secret or a ConfigMap "
            f"of the namespace), got {', '.join(map(str, value)) or 'nothing'}; {example}"
        )
    source, reference = next(iter(value.items()))
    path = f"env.{name}.{source}"
    if not isinstance(reference, dict) or not all(isinstance(reference.get(k), str) for k in ("name", "key")):
        raise InputError(
            f"{where}: {path} needs name and key (strings) of a {ENV_SOURCES[source]}, got {reference!r}; {example}"
        )
    unknown = sorted(set(reference) - set(ENV_REFERENCE_FIELDS))
    if unknown:
        raise InputError(
            f"{where}: {path}: unknown field(s) {', '.join(unknown)}; it has {', '.join(ENV_REFERENCE_FIELDS)} "
            f"(the {ENV_SOURCES[source]} is one of the trainer's namespace); {example}"
        )
    if "optional" in reference and not isinstance(reference["optional"], bool):
        raise InputError(f"{where}: {path}: optional is true or false, got {reference['optional']!r}; {example}")
    if not reference["name"] or not DATA_KEY.match(reference["key"]):
        raise InputError(
            f"{where}: {path}: name {reference['name']!r}, key {reference['key']!r} is not a key of a "
            f"{ENV_SOURCES[source]} (letters, digits, '-', '_', '.'); {example}"
        )
    return {source: dict(reference)}


def check_env(env: Any, where: Path | str | None) -> dict[str, Any]:
    """A submit file's `env`: NAME to a literal (a string or a number) or a Secret's or ConfigMap's key."""
    if not isinstance(env, dict) or not all(isinstance(name, str) and name for name in env):
        raise InputError(f"{where}: env is a mapping of variable names to values; {ENV_EXAMPLE}")
    checked: dict[str, Any] = {}
    for name, value in env.items():
        example = ENV_EXAMPLE.replace("X:", f"{name}:")
        if isinstance(value, dict):
            checked[name] = _env_reference(name, value, str(where))
        elif value is None:
            raise InputError(
                f"{where}: env.{name} has no value: give one ('' for an empty string), or the key that holds it; "
                f"{example}"
            )
        elif isinstance(value, (str, int, float)):
            checked[name] = value
        else:
            raise InputError(
                f"{where}: env.{name} is a string or a mapping naming a Secret's or ConfigMap's key, got "
                f"{type(value).__name__}; {example}"
            )
    return checked


def env_references(secrets: list[str], configmaps: list[str]) -> dict[str, dict[str, Any]]:
    """`--env-from-secret NAME=SECRET:KEY` and `--env-from-configmap NAME=CONFIGMAP:KEY` as submit-file env entries."""
    found: dict[str, dict[str, Any]] = {}
    for flag, source, texts in (
        ("--env-from-secret", "secretKeyRef", secrets),
        ("--env-from-configmap", "configMapKeyRef", configmaps),
    ):
        form = f"NAME={ENV_SOURCES[source].upper()}:KEY"
        for text in texts:
            name, _, rest = text.partition("=")
            holder, _, key = rest.partition(":")
            if not (name and holder and key):
                raise InputError(
                    f"{flag} {text}: give {form}, e.g. {flag} WANDB_API_KEY=wandb:api-key (the variable, the "
                    f"{ENV_SOURCES[source]} of the namespace, its key)"
                )
            found[name] = _env_reference(name, {source: {"name": holder, "key": key}}, f"{flag} {text}")
    return found


def env_var(name: str, value: Any) -> dict[str, Any]:
    """One Kubernetes EnvVar: a literal value, or a `valueFrom` (a key of a Secret or a ConfigMap)."""
    if isinstance(value, dict):
        return {"name": name, "valueFrom": value}
    return {"name": name, "value": str(value)}
