import yaml

from chartlib import REPO, container, find, sts, template_text

EXAMPLES = REPO / "examples"


def test_argocd_application_points_at_the_chart_and_its_values_render(render):
    app = yaml.safe_load((EXAMPLES / "argocd-application.yaml").read_text())
    assert app["apiVersion"] == "argoproj.io/v1alpha1" and app["kind"] == "Application"
    source = app["spec"]["source"]
    assert source["path"] == "charts/areal-workers" and (REPO / source["path"] / "Chart.yaml").is_file()
    assert app["spec"]["destination"]["namespace"]
    (values_file,) = source["helm"]["valueFiles"]  # values live in Git, beside the Application
    values = yaml.safe_load((REPO / source["path"] / values_file).read_text())
    docs = render(values, release=source["helm"]["releaseName"], namespace=app["spec"]["destination"]["namespace"])
    assert {sts(docs, r)["spec"]["replicas"] for r in values["roles"]} == {2}
    assert template_text(values).stdout == template_text(values).stdout


def test_cpu_example_is_the_two_role_quick_start(render):
    values = yaml.safe_load((EXAMPLES / "values-example.yaml").read_text())
    docs = render(values)
    assert sorted(d["metadata"]["labels"]["areal.io/role"] for d in find(docs, "StatefulSet")) == ["actor", "rollout"]
    for name, replicas in (("actor", 2), ("rollout", 3)):
        s = sts(docs, name)
        assert s["spec"]["replicas"] == replicas
        assert container(s)["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}


def test_gpu_example_requests_gpus_and_records_forks(render):
    docs = render(yaml.safe_load((EXAMPLES / "values-gpu.yaml").read_text()))
    for name in ("actor", "rollout"):
        assert container(sts(docs, name))["resources"]["limits"]["nvidia.com/gpu"] == "8"
    reward = sts(docs, "reward")
    assert "nvidia.com/gpu" not in container(reward)["resources"]["limits"]
    assert reward["spec"]["replicas"] == sts(docs, "actor")["spec"]["replicas"]
