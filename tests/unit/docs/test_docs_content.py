"""The reference pages cover what the code does: troubleshooting has an entry for every reason the diagnosis can
give a worker, and the RBAC page a row for every verb of the controller's Role; in both languages."""

from __future__ import annotations

import ast
import re

import pytest
import yaml

from areal_workers.diagnosis import container_checks, pod_checks
from areal_workers.reasons import DECISIONS, DIAGNOSES, Reason
from docslib import DOCS, LANGUAGES, REPO, parse

DIAGNOSIS = REPO / "adapter" / "areal_workers" / "diagnosis"
# Every Problem.reason the diagnosis can produce: the diagnosis members of the one enumeration (areal_workers.reasons),
# Kubernetes' waiting, termination, pod and event reasons it passes through, and its own.
EMITTED_REASONS = tuple(sorted(str(reason) for reason in DIAGNOSES))
# Reasons the diagnosis compares against but reports under another name, or reads as evidence only.
READ_NOT_REPORTED = {
    "": "an empty pod reason: the container statuses say more",
    "Pulling": "image pull progress events",
    "Pulled": "image pull progress events",
    "Created": "container progress events",
    "Started": "container progress events",
    "FailedScheduling": "the scheduler's event, read for Unschedulable's message",
    "Unhealthy": "the kubelet's probe event, reported as ProbeFailing",
    "TriggeredScaleUp": "cluster-autoscaler's event: makes Unschedulable wait",
    "NodeLost": "reported as NodeNotReady",
    "Preempting": "reported as Preempted",
    "FailedToRetrieveImagePullSecret": "the kubelet's event, read to judge a refused first pull (ErrImagePull)",
}


def _compared_reasons() -> set[str]:
    """String constants the diagnosis compares a `reason` with, or passes as `reason=`, and the members of the
    enumeration it names."""
    found: set[str] = set()
    for path in DIAGNOSIS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Reason":
                found.add(str(Reason[node.attr]))
            if isinstance(node, ast.keyword) and node.arg == "reason" and isinstance(node.value, ast.Constant):
                found.add(node.value.value)
            if isinstance(node, ast.Compare):
                left = node.left
                name = left.id if isinstance(left, ast.Name) else getattr(left, "attr", "")
                if "reason" in name:
                    found |= {
                        constant.value
                        for comparator in node.comparators
                        for constant in ast.walk(comparator)
                        if isinstance(constant, ast.Constant) and isinstance(constant.value, str)
                    }
    return found


def test_the_list_of_reasons_is_the_codes():
    known = set(EMITTED_REASONS) | set(READ_NOT_REPORTED)
    from_code = (
        _compared_reasons()
        | container_checks._FATAL_WAITING
        | container_checks._RUNTIME_LOST
        | set(pod_checks._DISRUPTIONS.values())
    )
    unknown = sorted(from_code - known)
    assert not unknown, (
        f"the diagnosis knows reasons the enumeration does not: {unknown}; add each to areal_workers/reasons.py "
        "(and to docs/*/troubleshooting.md), or here to READ_NOT_REPORTED"
    )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_troubleshooting_has_an_entry_for_every_reason(lang):
    headings = [heading.text for heading in parse(DOCS / lang / "troubleshooting.md").headings if heading.level == 3]
    missing = [
        reason
        for reason in EMITTED_REASONS
        if not any(re.search(rf"(?<!\w){re.escape(reason)}(?!\w)", text) for text in headings)
    ]
    assert not missing, f"docs/{lang}/troubleshooting.md has no ### entry for {missing}"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_troubleshooting_has_a_row_for_every_decision_event(lang):
    """The Events section's table: one row per decision reason of the enumeration, and no reason it does not know."""
    text = (DOCS / lang / "troubleshooting.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \| (?:Normal|Warning) \|", text, re.M))
    assert rows == {str(reason) for reason in DECISIONS}, f"docs/{lang}/troubleshooting.md: Event rows {sorted(rows)}"


def _role_verbs() -> set[tuple[str, str, str]]:
    role = yaml.safe_load((REPO / "rbac" / "role.yaml").read_text())
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _table_verbs(lang: str) -> set[tuple[str, str, str]]:
    rows = set()
    for line in (DOCS / lang / "rbac.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`") and not cells[0].startswith("`rbac/"):
            group = cells[0].strip("`").strip('"')
            for resource in cells[1].split(","):
                rows.add((group, resource.strip(), cells[2]))
    return rows


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_rbac_page_explains_every_verb_of_the_role(lang):
    documented, granted = _table_verbs(lang), _role_verbs()
    assert documented == granted, (
        f"docs/{lang}/rbac.md: missing {sorted(granted - documented)}, "
        f"not in rbac/role.yaml {sorted(documented - granted)}"
    )


def test_the_demos_release_name_in_the_docs_is_the_one_the_demo_makes():
    """The commands `make demo DEMO_ARGS=--keep` prints (and the pages show) name the demo's release: the release of
    the demo's default experiment and trial (examples/bandit_demo/demo.py), which nothing else would notice change."""
    from areal_workers.naming import release_name

    expected = release_name("bandit", "demo")
    pages = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
    named = {match for page in pages for match in re.findall(r"aw-bandit-demo-[0-9a-f]{8}", page.read_text())}
    assert named == {expected}
    demo = (REPO / "examples" / "bandit_demo" / "demo.py").read_text()
    assert 'add_argument("--experiment", default="bandit"' in demo and 'add_argument("--trial", default="demo"' in demo


def transcript_commands() -> list[tuple[str, str]]:
    """(page, command) of every `$ command` line of a console transcript (a block that is not ```bash)."""
    pages = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
    found = []
    for page in pages:
        for language, text in re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), re.S | re.M):
            for line in text.splitlines():
                if line.startswith("$ ") and language != "bash":
                    found.append((str(page.relative_to(REPO)), re.sub(r"\s+#\s.*$", "", line[2:]).strip()))
    return found


def test_transcripts_show_commands_the_cli_takes_and_names_it_makes():
    """The transcripts show a trial that is not on any cluster here (their commands run in test_cli.py on one of the
    local cluster's); what they show must still be what the command line takes, and the release names the ones the
    experiment and trial shown give."""
    from areal_workers.cli.main import build_parser
    from areal_workers.naming import release_name

    commands = transcript_commands()
    assert commands, "the README shows a transcript of areal-workers"
    for page, command in commands:
        words = command.split()
        if words[0] == "areal-workers":
            build_parser().parse_args(words[1:])  # exits 2 on an option or command it does not take
        else:
            assert words[:2] == ["helm", "history"], f"{page}: {command}"
            assert words[2] == release_name("gsm8k", "trial0"), f"{page}: {command}"
    readme = (REPO / "README.md").read_text()
    assert release_name("gsm8k-grpo", "run-7") in readme and "experiment gsm8k-grpo, trial run-7" in readme
