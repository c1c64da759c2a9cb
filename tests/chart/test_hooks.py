import io
import json
import shutil
import sys
import urllib.error
import urllib.request
from contextlib import redirect_stdout

import pytest
import yaml

from chartlib import CHART, NAMESPACE, RELEASE, one, role, template_text

SELECTOR = f"app.kubernetes.io/name=areal-workers,app.kubernetes.io/instance={RELEASE}"


def run_health_script(container: dict, answers: dict, monkeypatch) -> tuple[int, str]:
    """Run the test Pod's python3 script here, with urlopen answering from `answers` (no network)."""

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def fake_urlopen(url, timeout):
        assert timeout == float(container["args"][0])
        answer = answers[url]
        if isinstance(answer, Exception):
            raise answer
        return Response(json.dumps(answer).encode())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    monkeypatch.setattr(sys, "argv", ["-c", *container["args"]])
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        exec(compile(container["command"][2], "test-health", "exec"), {})
    return exit_info.value.code, out.getvalue()


def test_helm_test_pod_passes_when_every_worker_is_healthy_and_lists_the_bad_ones(monkeypatch, render):
    docs = render({"roles": {"a": role(2), "b": role(1)}})
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation"  # `--logs` reads it
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE  # admitted by the NetworkPolicy
    c = pod["spec"]["containers"][0]
    urls = c["args"][1:]
    assert len(urls) == 3
    healthy = {url: {"status": "healthy", "forked_children": 0} for url in urls}
    code, out = run_health_script(c, healthy, monkeypatch)
    assert code == 0 and "3/3 workers healthy" in out

    broken = dict(healthy)
    broken[urls[1]] = urllib.error.URLError("connection refused")
    broken[urls[2]] = {"status": "starting"}
    code, out = run_health_script(c, broken, monkeypatch)
    assert code == 1 and "1/3 workers healthy" in out
    assert f"UNHEALTHY {urls[1]}: <urlopen error connection refused>" in out
    assert f"UNHEALTHY {urls[2]}" in out and f"UNHEALTHY {urls[0]}" not in out


def test_notes(tmp_path):
    """NOTES.txt is not part of `helm template` output: render it through tpl in a copy of the chart."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n'
    )
    values = {"roles": {"actor": role(2)}, "colocations": {"critic": "actor"}, "forks": {"ref": {"target": "actor"}}}
    out = template_text(values, chart=chart, extra=("--show-only", "templates/zz-notes.yaml")).stdout
    notes = yaml.safe_load(out)["data"]["notes"]
    assert f"kubectl get pods -n {NAMESPACE} -l {SELECTOR} -L areal.io/role -w" in notes
    assert f"helm test {RELEASE} -n {NAMESPACE} --logs" in notes
    assert f"areal-workers status -n {NAMESPACE} --release {RELEASE} " in notes  # the CLI's view and diagnosis
    assert f"areal-workers diagnose -n {NAMESPACE} --release {RELEASE} <role> " in notes
    assert f"kubectl logs -n {NAMESPACE} -l {SELECTOR},areal.io/role=<role>" in notes
    assert f"actor: 2 x {RELEASE}-areal-workers-actor, port 8000" in notes
    assert "critic: colocated on actor" in notes and "ref: forked as processes inside actor" in notes
    assert f"{RELEASE}-areal-workers-topology" in notes

    empty = yaml.safe_load(template_text({}, chart=chart, extra=("--show-only", "templates/zz-notes.yaml")).stdout)
    assert "No roles are defined" in empty["data"]["notes"]
    assert "hostNetwork" not in notes

    host = {"roles": {"actor": role(1), "nccl": role(1, hostNetwork=True, guardPort=9100)}}
    notes = yaml.safe_load(template_text(host, chart=chart, extra=("--show-only", "templates/zz-notes.yaml")).stdout)
    assert "WARNING: nccl uses hostNetwork" in notes["data"]["notes"] and "port 9100" in notes["data"]["notes"]
    assert "WARNING: actor" not in notes["data"]["notes"]
    rdma = {
        "roles": {
            "ib": role(1, rdma={"enabled": True}),
            "root": role(1, rdma={"enabled": True}, podSecurityContext={"runAsUser": 0, "runAsNonRoot": False}),
        }
    }
    notes = yaml.safe_load(template_text(rdma, chart=chart, extra=("--show-only", "templates/zz-notes.yaml")).stdout)
    assert "NOTE: ib has rdma.enabled and runs as uid 1000: IPC_LOCK stays in its bounding" in notes["data"]["notes"]
    assert "NOTE: root" not in notes["data"]["notes"]
    without = {**host, "networkPolicy": {"enabled": False}}
    notes = yaml.safe_load(template_text(without, chart=chart, extra=("--show-only", "templates/zz-notes.yaml")).stdout)
    assert "hostNetwork" not in notes["data"]["notes"]


def test_skip_tests_leaves_exactly_the_test_pod_out_of_a_plain_render_as_the_gitops_page_says():
    # `helm template | kubectl apply` would start the test Pod with the workers, before they are ready, and it
    # fails: docs/en/gitops.md and docs/zh/gitops.md tell that path to render with --skip-tests.
    values = {"roles": {"actor": role(2)}}
    full = [d for d in yaml.safe_load_all(template_text(values).stdout) if d]
    skipped = [d for d in yaml.safe_load_all(template_text(values, extra=("--skip-tests",)).stdout) if d]

    def hook(doc: dict) -> str | None:
        return (doc["metadata"].get("annotations") or {}).get("helm.sh/hook")

    assert [(d["kind"], hook(d)) for d in full if hook(d)] == [("Pod", "test")]
    assert skipped == [d for d in full if hook(d) is None]
    for lang in ("en", "zh"):
        page = (CHART.parents[1] / "docs" / lang / "gitops.md").read_text()
        assert "helm template --skip-tests" in page and "--skip-tests | kubectl apply" in page, lang
