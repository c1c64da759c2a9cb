"""release/ownership.py's CHART_KINDS is what the chart renders: with every template of the chart rendered at once,
the (API group, kind) pairs of its objects, `helm test` hooks included, are exactly that set, all in the release's
namespace, and its Roles grant nothing beyond rbac/role.yaml and rbac/reaper.yaml. So the check areal-workers makes
of a recorded revision before `rollback`, `down` and `reap` act on it cannot drift from the chart: a template of a new
kind fails here until the set names it, and a template these values leave out fails here until they render it."""

from __future__ import annotations

import re

import yaml

from areal_workers.release.client import chart_grants, merge_values
from areal_workers.release.ownership import CHART_KINDS, foreign_object_problem, grants
from chartlib import CHART, FULL_VALUES, NAMESPACE, RELEASE, template_text

# Every optional feature: chartlib's (forks, controllerRbac, the reaper, ...) plus the ones it leaves at their
# defaults or off (the workers' egress policy, a shared volume, Kueue, the helm test, the controller's policy).
EVERY_FEATURE = merge_values(
    FULL_VALUES,
    {
        "networkPolicy": {"enabled": True, "egress": {"enabled": True}, "controller": {"isolate": True}},
        "sharedStorage": {"enabled": True, "claimName": "shared"},
        "workerDefaults": {"kueue": {"queueName": "q"}, "disruptionBudget": {"enabled": True}},
        "serviceAccount": {"create": True},
        "tests": {"enabled": True},
    },
)
SOURCE = re.compile(r"^# Source: areal-workers/(templates/\S+)$", re.MULTILINE)


def rendered() -> tuple[str, list[dict]]:
    text = template_text(EVERY_FEATURE).stdout
    return text, [d for d in yaml.safe_load_all(text) if d]


def test_every_template_of_the_chart_is_rendered_by_these_values():
    text, _ = rendered()
    templates = {
        str(path.relative_to(CHART)) for path in (CHART / "templates").rglob("*.yaml") if not path.name.startswith("_")
    }
    assert templates, "no template found"
    assert templates - set(SOURCE.findall(text)) == set(), "render them in EVERY_FEATURE"


def test_the_kinds_the_chart_renders_are_the_kinds_a_recorded_revision_may_hold():
    _, documents = rendered()
    kinds = {(d["apiVersion"].rpartition("/")[0], d["kind"]) for d in documents}
    assert kinds == CHART_KINDS


def test_every_object_is_in_the_release_namespace_and_every_role_within_rbac():
    _, documents = rendered()
    assert {d["metadata"].get("namespace") for d in documents} == {NAMESPACE}
    roles = [d for d in documents if d["kind"] == "Role"]
    assert len(roles) == 2  # the controller's and the reaper's
    for role in roles:
        assert grants(role["rules"]) <= chart_grants(), role["metadata"]["name"]


def test_the_check_of_a_recorded_revision_passes_what_the_chart_renders():
    """As helm records it: the hooks apart from the manifest."""
    text, documents = rendered()
    pieces = [p for p in re.split(r"(?m)^---\s*$", text) if p.strip()]
    hooks = [p for p in pieces if "helm.sh/hook" in p]
    manifest = "---\n".join(p for p in pieces if p not in hooks)
    assert hooks and len(pieces) == len(documents)
    named = [(f"hook-{i}", hook) for i, hook in enumerate(hooks)]
    assert foreign_object_problem(RELEASE, NAMESPACE, 1, manifest, named, chart_grants()) is None
