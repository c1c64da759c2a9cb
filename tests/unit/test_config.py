import dataclasses
from pathlib import Path

import pytest

from areal_workers.config import (
    BUNDLED_CHART,
    ENVIRONMENT,
    ConfigError,
    KubernetesSchedulerConfig,
    parse_node_selector,
)

ALL_VARIABLES = {
    "AREAL_K8S_NAMESPACE": "areal",
    "AREAL_K8S_CONTEXT": "gpu-cluster",
    "AREAL_K8S_SERVICE_ACCOUNT": "areal-sa",
    "AREAL_K8S_IMAGE_PULL_POLICY": "Always",
    "AREAL_K8S_TERMINATION_GRACE_SECONDS": "120",
    "AREAL_K8S_NODE_SELECTOR": "pool=gpu,zone=a",
    "AREAL_K8S_LEASE_GRACE_SECONDS": "60",
    "AREAL_K8S_OWNER_POD": "trainer-x7k2p",
    "AREAL_K8S_OWNER_POD_UID": "3f1c2a9e-0000-4000-8000-000000000001",
    "AREAL_K8S_KUEUE_QUEUE": "rl",
    "AREAL_K8S_KUEUE_PRIORITY_CLASS": "research-high",
    "AREAL_K8S_HELM_EXECUTABLE": "/opt/helm4/bin/helm",
}


# --- defaults -----------------------------------------------------------------------------------


def test_defaults():
    config = KubernetesSchedulerConfig()
    assert config.namespace == "default"
    assert config.kubeconfig is None and config.context is None
    assert config.chart == str(BUNDLED_CHART)
    assert (Path(config.chart) / "Chart.yaml").is_file()
    assert config.chart_version is None and config.chart_repo is None
    assert config.values_files == ()
    assert config.image is None
    assert config.image_pull_policy is None
    assert config.image_pull_secrets == ()
    assert config.service_account is None
    assert config.termination_grace_seconds is None
    assert dict(config.node_selector) == {}
    assert config.guard_port == 8000
    assert config.n_gpus_per_node == 8
    assert config.python_executable == "python"
    assert config.fork_module == "areal.infra.rpc.rpc_server"
    assert config.helm_executable == "helm"
    assert config.helm_timeout == 300.0
    assert config.history_max == 10
    assert config.ready_timeout == 600.0
    assert config.fork_mode == "process"
    assert config.fork_ready_timeout == 60.0
    assert config.ownership == "managed"
    assert config.release_name is None


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        KubernetesSchedulerConfig().namespace = "other"  # type: ignore[misc]


def test_default_node_selector_is_not_shared():
    first, second = KubernetesSchedulerConfig(), KubernetesSchedulerConfig()
    first.node_selector["x"] = "y"  # type: ignore[index]
    assert dict(second.node_selector) == {}


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields,field_name",
    [
        ({"image_pull_policy": "always"}, "image_pull_policy"),
        ({"image_pull_policy": ""}, "image_pull_policy"),
        ({"fork_mode": "thread"}, "fork_mode"),
        ({"ownership": "shared"}, "ownership"),
        ({"guard_port": 0}, "guard_port"),
        ({"guard_port": 65536}, "guard_port"),
        ({"guard_port": -1}, "guard_port"),
        ({"termination_grace_seconds": -1}, "termination_grace_seconds"),
        ({"helm_timeout": 0}, "helm_timeout"),
        ({"helm_timeout": -5.0}, "helm_timeout"),
        ({"ready_timeout": 0}, "ready_timeout"),
        ({"fork_ready_timeout": -1}, "fork_ready_timeout"),
        ({"destroy_timeout": 0}, "destroy_timeout"),
        ({"history_max": 1}, "history_max"),
        ({"history_max": 0}, "history_max"),
    ],
)
def test_invalid_values_rejected_naming_the_field(fields, field_name):
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig(**fields)
    assert field_name in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "fields",
    [
        {"image_pull_policy": "Always"},
        {"image_pull_policy": "IfNotPresent"},
        {"image_pull_policy": "Never"},
        {"fork_mode": "pod"},
        {"guard_port": 1},
        {"guard_port": 65535},
        {"termination_grace_seconds": 0},
        {"history_max": 2},
        {"helm_timeout": 0.5},
    ],
)
def test_boundary_values_accepted(fields):
    config = KubernetesSchedulerConfig(**fields)
    for key, value in fields.items():
        assert getattr(config, key) == value


def test_external_ownership_requires_release_name():
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig(ownership="external")
    assert "release_name" in str(info.value)
    with pytest.raises(ConfigError):
        KubernetesSchedulerConfig(ownership="external", release_name="")
    config = KubernetesSchedulerConfig(ownership="external", release_name="their-release")
    assert config.release_name == "their-release"


def test_a_kueue_priority_class_needs_its_queue():
    with pytest.raises(ConfigError, match="kueue_priority_class needs kueue_queue"):
        KubernetesSchedulerConfig(kueue_priority_class="high")
    assert KubernetesSchedulerConfig(kueue_queue="rl").kueue_priority_class is None


def test_image_pull_policy_message_lists_the_choices():
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig(image_pull_policy="sometimes")
    assert "Always" in str(info.value) and "IfNotPresent" in str(info.value) and "Never" in str(info.value)
    assert "'sometimes'" in str(info.value)


# --- from_env -----------------------------------------------------------------------------------


def test_every_setting_has_its_variable_and_pr_1316s_names_are_among_them():
    assert ENVIRONMENT == {
        f"AREAL_K8S_{field.name.upper()}": field.name for field in dataclasses.fields(KubernetesSchedulerConfig)
    }
    assert set(ALL_VARIABLES) <= set(ENVIRONMENT)


def test_settings_a_platform_sets_for_an_unmodified_trainer():
    config = KubernetesSchedulerConfig.from_env(
        {
            "AREAL_K8S_VALUES_FILES": "/etc/areal/platform.yaml,/etc/areal/gpu.yaml",
            "AREAL_K8S_IMAGE": "r.io/areal:1",
            "AREAL_K8S_CAPACITY_CHECK": "warn",
            "AREAL_K8S_FORK_MODE": "pod",
            "AREAL_K8S_READY_TIMEOUT": "1200",
            "AREAL_K8S_IMAGE_PULL_SECRETS": '["registry-a", "registry-b"]',
            "AREAL_K8S_GUARD_PORT": "9000",
            "AREAL_K8S_CHART": "oci://r.io/charts/areal-workers",
            "AREAL_K8S_CHART_VERSION": "0.2.0",
        }
    )
    assert config.values_files == ("/etc/areal/platform.yaml", "/etc/areal/gpu.yaml")
    assert (config.image, config.capacity_check, config.fork_mode) == ("r.io/areal:1", "warn", "pod")
    assert config.ready_timeout == 1200.0 and config.guard_port == 9000
    assert config.image_pull_secrets == ("registry-a", "registry-b")
    assert (config.chart, config.chart_version) == ("oci://r.io/charts/areal-workers", "0.2.0")


@pytest.mark.parametrize(
    "environ, message",
    [
        (
            {"AREAL_K8S_VALUE_FILES": "a.yaml"},
            "unknown setting(s) AREAL_K8S_VALUE_FILES (did you mean AREAL_K8S_VALUES_FILES?)",
        ),
        ({"AREAL_K8S_GUARD_PORT": "eight"}, "AREAL_K8S_GUARD_PORT must be an integer, got 'eight'"),
        ({"AREAL_K8S_READY_TIMEOUT": "soon"}, "AREAL_K8S_READY_TIMEOUT: 'soon' is not a duration: use a duration such"),
        ({"AREAL_K8S_HELM_TIMEOUT": "-5m"}, "AREAL_K8S_HELM_TIMEOUT: '-5m' is not a duration"),
        ({"AREAL_K8S_DESTROY_TIMEOUT": "inf"}, "AREAL_K8S_DESTROY_TIMEOUT: 'inf': a time-out is finite and not"),
        ({"AREAL_K8S_FORK_MODE": "thread"}, "fork_mode must be 'process' or 'pod'"),
        ({"AREAL_K8S_IMAGE_PULL_SECRETS": "[1]"}, "AREAL_K8S_IMAGE_PULL_SECRETS must be a JSON list of strings"),
    ],
)
def test_a_bad_variable_is_refused_with_its_name(environ, message):
    with pytest.raises(ConfigError) as raised:
        KubernetesSchedulerConfig.from_env(environ)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900.0), ("90s", 90.0), ("1h30m", 5400.0), ("500ms", 0.5), ("600", 600.0), ("2.5", 2.5)],
)
def test_time_outs_take_durations_as_kubectl_and_helm_do(text, seconds):
    names = ("helm_timeout", "ready_timeout", "fork_ready_timeout", "destroy_timeout", "lease_grace_seconds")
    config = KubernetesSchedulerConfig.from_env({f"AREAL_K8S_{name.upper()}": text for name in names})
    assert all(getattr(config, name) == pytest.approx(seconds) for name in names)


def test_from_env_reads_every_variable():
    config = KubernetesSchedulerConfig.from_env(dict(ALL_VARIABLES))
    assert config.namespace == "areal"
    assert config.context == "gpu-cluster"
    assert config.service_account == "areal-sa"
    assert config.image_pull_policy == "Always"
    assert config.termination_grace_seconds == 120
    assert isinstance(config.termination_grace_seconds, int)
    assert dict(config.node_selector) == {"pool": "gpu", "zone": "a"}
    assert config.lease_grace_seconds == 60
    assert (config.owner_pod, config.owner_pod_uid) == ("trainer-x7k2p", "3f1c2a9e-0000-4000-8000-000000000001")
    assert (config.kueue_queue, config.kueue_priority_class) == ("rl", "research-high")
    assert config.helm_executable == "/opt/helm4/bin/helm"
    # everything else keeps its default
    default = KubernetesSchedulerConfig()
    for field in dataclasses.fields(KubernetesSchedulerConfig):
        if field.name not in ENVIRONMENT.values():
            assert getattr(config, field.name) == getattr(default, field.name), field.name


def test_from_env_empty_mapping_is_the_default():
    assert KubernetesSchedulerConfig.from_env({}) == KubernetesSchedulerConfig()


def test_from_env_empty_values_are_ignored():
    config = KubernetesSchedulerConfig.from_env(dict.fromkeys(ALL_VARIABLES, ""))
    assert config == KubernetesSchedulerConfig()


def test_from_env_ignores_other_variables():
    config = KubernetesSchedulerConfig.from_env({"AREAL_IMAGE": "x:y", "NAMESPACE": "n", "HOME": "/root"})
    assert config == KubernetesSchedulerConfig()


def test_from_env_defaults_to_os_environ(monkeypatch):
    for variable in ALL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AREAL_K8S_NAMESPACE", "from-os")
    assert KubernetesSchedulerConfig.from_env().namespace == "from-os"


def test_explicit_environ_wins_over_os_environ(monkeypatch):
    monkeypatch.setenv("AREAL_K8S_NAMESPACE", "from-os")
    assert KubernetesSchedulerConfig.from_env({}).namespace == "default"


@pytest.mark.parametrize("raw", ["abc", "1.5", "30s", "ten"])
def test_bad_termination_grace_seconds(raw):
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig.from_env({"AREAL_K8S_TERMINATION_GRACE_SECONDS": raw})
    assert "AREAL_K8S_TERMINATION_GRACE_SECONDS" in str(info.value)
    assert repr(raw) in str(info.value)


def test_negative_termination_grace_seconds_from_env():
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig.from_env({"AREAL_K8S_TERMINATION_GRACE_SECONDS": "-1"})
    assert "termination_grace_seconds" in str(info.value)


def test_bad_pull_policy_from_env():
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig.from_env({"AREAL_K8S_IMAGE_PULL_POLICY": "always"})
    assert "image_pull_policy" in str(info.value)


def test_node_selector_json_from_env():
    config = KubernetesSchedulerConfig.from_env({"AREAL_K8S_NODE_SELECTOR": '{"nvidia.com/gpu.product": "H100"}'})
    assert dict(config.node_selector) == {"nvidia.com/gpu.product": "H100"}


@pytest.mark.parametrize(
    "raw", ["pool", "=gpu", "pool=gpu,zone", '{"pool": 1}', '{"pool": "gpu"', '["pool"]', '{"pool": null}']
)
def test_bad_node_selector_from_env_names_the_variable(raw):
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig.from_env({"AREAL_K8S_NODE_SELECTOR": raw})
    assert "AREAL_K8S_NODE_SELECTOR" in str(info.value)


def test_unknown_override_rejected_listing_known_fields():
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig.from_env({}, namespce="x", imag="y")
    message = str(info.value)
    assert "imag, namespce" in message
    for field in dataclasses.fields(KubernetesSchedulerConfig):
        assert field.name in message


def test_explicit_overrides_win_over_env():
    config = KubernetesSchedulerConfig.from_env(
        dict(ALL_VARIABLES),
        namespace="explicit",
        termination_grace_seconds=5,
        node_selector={"k": "v"},
        image="repo:tag",
    )
    assert config.namespace == "explicit"
    assert config.termination_grace_seconds == 5
    assert dict(config.node_selector) == {"k": "v"}
    assert config.image == "repo:tag"
    assert config.context == "gpu-cluster"  # not overridden: from the environment


def test_overrides_are_validated():
    """Overrides are validated like constructor arguments."""
    with pytest.raises(ConfigError):
        KubernetesSchedulerConfig.from_env({}, guard_port=0)


def test_override_fixes_external_ownership():
    config = KubernetesSchedulerConfig.from_env({}, ownership="external", release_name="r")
    assert (config.ownership, config.release_name) == ("external", "r")


# --- parse_node_selector ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("k=v,k2=v2", {"k": "v", "k2": "v2"}),
        (" k = v , k2=v2 ,", {"k": "v", "k2": "v2"}),
        ("node.kubernetes.io/instance-type=p5.48xlarge", {"node.kubernetes.io/instance-type": "p5.48xlarge"}),
        ("empty=", {"empty": ""}),
        ("", {}),
        ('{"k": "v", "k2": "v2"}', {"k": "v", "k2": "v2"}),
        ('  {"k": "v"}  ', {"k": "v"}),
        ("{}", {}),
    ],
)
def test_parse_node_selector(raw, expected):
    assert parse_node_selector(raw) == expected


@pytest.mark.parametrize("raw", ["k", "=v", "k=v,nokey", "{not json", '{"k": 1}', '{"k": ["v"]}'])
def test_parse_node_selector_rejects(raw):
    with pytest.raises(ConfigError) as info:
        parse_node_selector(raw, "SOURCE")
    assert "SOURCE" in str(info.value)


def test_parse_node_selector_json_must_be_an_object():
    with pytest.raises(ConfigError):
        parse_node_selector("[1, 2]")


def test_namespace_falls_back_to_kubernetes_namespace_then_the_pods_own(tmp_path):
    """AReaL PR #1316's chain: AREAL_K8S_NAMESPACE, then KUBERNETES_NAMESPACE, then the service account's file."""
    mounted = tmp_path / "namespace"
    mounted.write_text("from-pod\n")
    missing = tmp_path / "absent"

    def namespace(environ, path):
        return KubernetesSchedulerConfig.from_env(environ, namespace_file=path).namespace

    assert namespace({"AREAL_K8S_NAMESPACE": "a", "KUBERNETES_NAMESPACE": "k"}, mounted) == "a"
    assert namespace({"KUBERNETES_NAMESPACE": "k"}, mounted) == "k"
    assert namespace({}, mounted) == "from-pod"
    assert namespace({}, missing) == "default"
    assert KubernetesSchedulerConfig.from_env({}, namespace_file=mounted, namespace="explicit").namespace == "explicit"


@pytest.mark.parametrize("mode", ["reject", "warn", "off"])
def test_capacity_check_modes(mode):
    assert KubernetesSchedulerConfig(capacity_check=mode).capacity_check == mode


def test_capacity_check_rejects_other_words():
    with pytest.raises(ConfigError, match="capacity_check must be one of reject, warn, off"):
        KubernetesSchedulerConfig(capacity_check="strict")


@pytest.mark.parametrize("release", ["1abc", "a.b", "Upper", "x" * 54])
def test_a_release_name_the_charts_services_cannot_carry_is_refused(release):
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig(release_name=release)
    assert str(info.value).startswith("release_name (AREAL_K8S_RELEASE_NAME): ")
    assert repr(release) in str(info.value)


def test_a_release_name_from_the_environment_is_checked_too():
    with pytest.raises(ConfigError) as info:
        KubernetesSchedulerConfig.from_env({"AREAL_K8S_RELEASE_NAME": "a.b"})
    assert "'a-b'" in str(info.value)


def test_lease_takeover_is_off_unless_asked_for():
    assert KubernetesSchedulerConfig.from_env({}).lease_takeover is False
    assert KubernetesSchedulerConfig.from_env({"AREAL_K8S_LEASE_TAKEOVER": "true"}).lease_takeover is True
    with pytest.raises(ConfigError, match="AREAL_K8S_LEASE_TAKEOVER must be true or false"):
        KubernetesSchedulerConfig.from_env({"AREAL_K8S_LEASE_TAKEOVER": "sometimes"})
