import shutil

import yaml

from areal_workers import __version__
from chartlib import CHART, role, sts, template_text

# Every create/scale/fork/delete of the adapter is one `helm upgrade`. A pod template that changes
# restarts its workers, and a restarted worker loses its engines: only a role's own values may do that.


def test_adding_roles_forks_and_colocations_leaves_existing_workers_alone(render):
    before = render({"roles": {"actor": role(2)}})
    after = render(
        {
            "roles": {"actor": role(2), "rollout": role(4)},
            "colocations": {"critic": "actor"},
            "forks": {"ref": {"target": "actor"}, "helper": {"target": "actor", "mode": "pod"}},
        }
    )
    assert sts(before, "actor") == sts(after, "actor")


def test_scaling_a_role_changes_only_its_replicas(render):
    small = sts(render({"roles": {"actor": role(2)}}), "actor")
    large = sts(render({"roles": {"actor": role(5)}}), "actor")
    assert large["spec"].pop("replicas") == 5 and small["spec"].pop("replicas") == 2
    assert small == large


def test_a_chart_version_bump_does_not_touch_pod_templates(tmp_path):
    bumped = tmp_path / "areal-workers"
    shutil.copytree(CHART, bumped)
    chart_yaml = bumped / "Chart.yaml"
    chart_yaml.write_text(
        chart_yaml.read_text()
        .replace(f"version: {__version__}", "version: 99.0.0")
        .replace('appVersion: "1.0.4"', 'appVersion: "1.0.5"')
    )
    values = {"image": {"tag": "v1.0.4"}, "roles": {"actor": role(2)}}
    old = [d for d in yaml.safe_load_all(template_text(values).stdout) if d]
    new = [d for d in yaml.safe_load_all(template_text(values, chart=bumped).stdout) if d]
    assert sts(new, "actor")["metadata"]["labels"]["helm.sh/chart"] == "areal-workers-99.0.0"
    assert sts(old, "actor")["spec"]["template"] == sts(new, "actor")["spec"]["template"]
    assert sts(old, "actor")["spec"]["selector"] == sts(new, "actor")["spec"]["selector"]
