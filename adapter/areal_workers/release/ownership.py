"""Whether a helm release is one of this chart's: checked before anything that uninstalls, rolls back, upgrades or
deletes, since helm's release names are shared by every chart of the namespace; and whether a revision helm recorded
holds only what the chart renders, checked before helm acts on it (pure).

Helm keeps a release's revisions in Secrets of its namespace, which the controller identity may write (helm needs
it). A revision written there by hand can list any object: `helm rollback` applies its manifest, `helm uninstall`
deletes what it lists, and both run its hooks, with the rights of whoever runs them. So before areal-workers acts on
a revision, its manifest and hooks must hold only the kinds the chart renders, in the release's namespace, with Roles
no wider than the chart's and RoleBindings only of those Roles to ServiceAccounts of the namespace.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .. import naming
from ..errors import InvalidSchedulerSetupError

__all__ = [
    "CHART_KINDS",
    "UntrustedRevisionError",
    "foreign_chart_problem",
    "foreign_object_problem",
    "grants",
    "split_manifest",
]

RBAC_GROUP = "rbac.authorization.k8s.io"
# (API group, kind) of every object the chart renders, `helm test` hooks included; all namespaced.
# tests/chart/test_recorded_kinds.py renders every template of the chart and checks that this is what they render.
CHART_KINDS = frozenset(
    {
        ("", "ConfigMap"),
        ("", "Pod"),
        ("", "Service"),
        ("", "ServiceAccount"),
        ("apps", "StatefulSet"),
        ("batch", "CronJob"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("policy", "PodDisruptionBudget"),
        (RBAC_GROUP, "Role"),
        (RBAC_GROUP, "RoleBinding"),
    }
)
# Helm's own split of a manifest into documents (releaseutil.SplitManifests): a `---` at the start of a line, whatever
# follows it. Splitting here first, then parsing each piece, sees every document helm or the API machinery would.
_SEPARATOR = re.compile(r"(?:^|[\t\n\f\r ]*\n)---[\t\n\f\r ]*")

Grant = tuple[str, str, str]  # API group, resource, verb


class UntrustedRevisionError(InvalidSchedulerSetupError):
    """A revision helm recorded holds what the chart never renders (or is another chart's): nothing was done."""


def foreign_chart_problem(release: str, namespace: str, chart: str | None, revision: int | None = None) -> str | None:
    """Why the release must be left alone, or None when its current revision (or `revision`, the one it would
    return to) is of this chart. `chart`: the chart name helm recorded for it (`Chart.yaml`'s name); None: helm has
    no release of that name."""
    if chart is None or chart == naming.CHART_NAME:
        return None
    what = f"release {release}" if revision is None else f"revision {revision} of release {release}"
    return (
        f"{what} in namespace {namespace} is a release of chart {chart!r}, not {naming.CHART_NAME!r}: "
        f"areal-workers changes only releases of its own chart"
    )


def _strict_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
    """A mapping without merge keys or duplicate keys (with _refuse_anchors, what _StrictLoader refuses)."""
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise yaml.constructor.ConstructorError(None, None, "a merge key (<<)", key_node.start_mark)
        key = loader.construct_object(key_node, deep=True)
        marker = repr(key)
        if marker in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(marker)
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep)


class _StrictLoader(yaml.SafeLoader):
    """YAML as the chart renders it: no duplicate keys, no merge keys, no tags beyond the safe ones, and (checked on
    the parser's events first: _refuse_anchors) no anchors or aliases. Where YAML parsers could disagree about what
    a document says, the revision is refused instead."""

    construct_mapping = _strict_mapping


# The same on libyaml's parser where PyYAML has it: a recorded manifest of four roles reads in a sixth of the
# pure-Python parser's time (both passes), and helm's records are read before every uninstall, rollback and recovery.
STRICT_LOADER: Any = _StrictLoader
if yaml.__with_libyaml__:

    class _LibyamlStrictLoader(yaml.CSafeLoader):
        construct_mapping = _strict_mapping

    STRICT_LOADER = _LibyamlStrictLoader


def _refuse_anchors(text: str) -> None:
    events: Iterable[Any] = yaml.parse(text, Loader=STRICT_LOADER)  # libyaml's or PyYAML's events and marks
    for event in events:
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.constructor.ConstructorError(None, None, "an anchor or alias", event.start_mark)


def split_manifest(text: str) -> list[Any]:
    """Every document of a recorded manifest (empty ones dropped); raises yaml.YAMLError when one cannot be read."""
    documents = []
    for piece in _SEPARATOR.split(text or ""):
        _refuse_anchors(piece)
        documents += [d for d in yaml.load_all(piece, Loader=STRICT_LOADER) if d is not None]  # noqa: S506
    return documents


def grants(rules: Iterable[Mapping[str, Any]]) -> set[Grant]:
    """Each (API group, resource, verb) the rules grant, wildcards as written."""
    return {
        (group, resource, verb)
        for rule in rules
        for group, resource, verb in itertools.product(
            rule.get("apiGroups") or [], rule.get("resources") or [], rule.get("verbs") or []
        )
    }


@dataclass(frozen=True)
class _Recorded:
    where: str  # "its manifest", "its hook <name>"
    body: Any

    def field(self, *path: str) -> Any:
        value = self.body
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        return value

    @property
    def kind(self) -> tuple[str, str]:
        api_version, kind = self.field("apiVersion"), self.field("kind")
        group = api_version.rpartition("/")[0] if isinstance(api_version, str) else "?"
        return group, kind if isinstance(kind, str) else "?"

    def named(self, namespace: str | None = None, detail: str = "") -> str:
        """`ClusterRoleBinding x without a namespace in its manifest`, `Role y in namespace rl in its hook z`."""
        name = self.field("metadata", "name")
        where = self.field("metadata", "namespace") or namespace
        placed = f"in namespace {where}" if where else "without a namespace"
        return f"{self.kind[1]} {name or '?'}{detail} {placed} in {self.where}"


def _recorded(manifest: str, hooks: Iterable[tuple[str, str]]) -> Iterator[_Recorded]:
    for where, text in [("its manifest", manifest), *((f"its hook {name}", text) for name, text in hooks)]:
        try:
            documents = split_manifest(text)
        except yaml.YAMLError as error:
            yield _Recorded(where, error)
            continue
        for document in documents:
            yield _Recorded(where, document)


def foreign_object_problem(
    release: str,
    namespace: str,
    revision: int,
    manifest: str,
    hooks: Iterable[tuple[str, str]],
    chart_grants: set[Grant],
) -> str | None:
    """What in revision `revision` of the release (its manifest, and `hooks` as (name, manifest)) the chart would
    never render, or None. `chart_grants`: what the chart's Roles grant (rbac/role.yaml and rbac/reaper.yaml)."""
    objects = list(_recorded(manifest, hooks))
    problem = _first_problem(objects, namespace, chart_grants)
    if problem is None:
        return None
    return (
        f"revision {revision} of release {release} in namespace {namespace} holds {problem}, which chart "
        f"{naming.CHART_NAME} never renders: that revision was not written by helm from this chart (helm keeps "
        f"revisions in Secrets the controller identity may write). Nothing was changed. Inspect it with "
        f"`helm get manifest {release} --revision {revision} -n {namespace}` and `helm get hooks {release} "
        f"--revision {revision} -n {namespace}`; if it is what you want, act on it with helm itself after checking, "
        f"as an administrator; if not, find who wrote Secret sh.helm.release.v1.{release}.v{revision} and delete it"
    )


def _first_problem(objects: list[_Recorded], namespace: str, chart_grants: set[Grant]) -> str | None:
    names = [o.field("metadata", "name") for o in objects if o.kind == (RBAC_GROUP, "Role")]
    roles = {name for name in names if isinstance(name, str)}
    for recorded in objects:
        if isinstance(recorded.body, yaml.YAMLError):
            text = " ".join(str(recorded.body).split())
            return f"YAML that cannot be read as the chart renders it ({recorded.where}: {text})"
        if not isinstance(recorded.body, Mapping):
            return f"a document that is not an object ({recorded.where})"
        if recorded.kind not in CHART_KINDS:
            chart_kind = recorded.kind[1] in {kind for _, kind in CHART_KINDS}  # then its API group is the problem
            return recorded.named(detail=f" of apiVersion {recorded.field('apiVersion')}" if chart_kind else "")
        where = recorded.field("metadata", "namespace")
        if where not in (None, "", namespace):
            return f"{recorded.named()}, another namespace than the release's"
        if recorded.kind == (RBAC_GROUP, "Role"):
            problem = _role_problem(recorded.field("rules"), chart_grants)
        elif recorded.kind == (RBAC_GROUP, "RoleBinding"):
            problem = _binding_problem(recorded.field("roleRef"), recorded.field("subjects"), namespace, roles)
        else:
            continue
        if problem is not None:
            return f"{recorded.named(namespace)} {problem}"
    return None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _role_problem(rules: Any, chart_grants: set[Grant]) -> str | None:
    if rules is None:
        return None
    if not isinstance(rules, list) or not all(
        isinstance(rule, Mapping)
        and not rule.get("nonResourceURLs")
        and all(_strings(rule.get(key) or []) for key in ("apiGroups", "resources", "verbs", "resourceNames"))
        for rule in rules
    ):
        return "with rules not written as the chart writes them"
    wider = sorted(grants(rules) - chart_grants)
    if not wider:
        return None
    shown = ", ".join(f"{verb} {resource}" + (f".{group}" if group else "") for group, resource, verb in wider)
    return f"granting what the chart's Roles do not ({shown})"


def _binding_problem(ref: Any, subjects: Any, namespace: str, roles: set[str]) -> str | None:
    if not isinstance(ref, Mapping):
        return f"with roleRef {ref!r}"
    if ref.get("kind") != "Role" or not isinstance(ref.get("name"), str):
        return f"binding {ref.get('kind')} {ref.get('name')}, not a Role"
    if ref["name"] not in roles:
        return f"binding Role {ref['name']}, which the same revision does not hold"
    for subject in subjects if isinstance(subjects, list) else [] if subjects is None else [subjects]:
        if not isinstance(subject, Mapping) or subject.get("kind") != "ServiceAccount":
            return f"binding a subject that is not a ServiceAccount ({subject!r})"
        if subject.get("namespace") not in (None, namespace):
            return f"binding ServiceAccount {subject.get('name')} of namespace {subject.get('namespace')}"
    return None
