import copy
import json
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
import yaml

from areal_workers.areal_types import Job, SchedulingSpec
from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.release import image_reference
from areal_workers.release.client import merge_values
from areal_workers.release.image_reference import split_image
from areal_workers.release.values import (
    DEFAULT_COMMAND,
    THREAD_VARIABLES,
    TopologyError,
    base_values,
    check_spec,
    cluster_values,
    resolve_spec,
    role_values,
    worker_command,
)
from repo_paths import REPO

CHART = REPO / "charts" / "areal-workers"
SIF_DEFAULT = "/storage/openpsi/images/areal-latest.sif"


def spec(**fields) -> SchedulingSpec:
    """A spec Kubernetes accepts (a real image, the rpc_server), with overrides."""
    base = {"cpu": 2, "mem": 4, "image": "ghcr.io/inclusionai/areal-runtime:v1.0.4", "cmd": DEFAULT_COMMAND}
    base.update(fields)
    return SchedulingSpec(**base)


def rejection(role: str, value: SchedulingSpec) -> TopologyError:
    with pytest.raises(TopologyError) as info:
        check_spec(role, value)
    return info.value


# --- resolve_spec: replicas and the number of specs ------------------------------------------------


def test_replicas_zero_rejected_with_areal_message():
    with pytest.raises(TopologyError) as info:
        resolve_spec(Job(role="actor", replicas=0))
    assert info.value.worker_key == "actor"
    assert info.value.reason == "Invalid configuration"
    assert info.value.details == "replicas must be greater than 0"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("replicas", [-1, -7])
def test_negative_replicas_rejected(replicas):
    with pytest.raises(TopologyError) as info:
        resolve_spec(Job(role="actor", replicas=replicas, tasks=[spec()]))
    assert "replicas must be greater than 0" in info.value.details
    assert str(replicas) in info.value.details


@pytest.mark.parametrize("replicas", [True, False, 2.0, "2", None])
def test_non_integer_replicas_rejected(replicas):
    with pytest.raises(TopologyError) as info:
        resolve_spec(Job(role="actor", replicas=replicas, tasks=[spec()]))
    assert info.value.reason == "Invalid configuration"
    assert "replicas must be an integer" in info.value.details
    assert repr(replicas) in info.value.details


def test_invalid_role_rejected_before_anything_else():
    with pytest.raises(TopologyError) as info:
        resolve_spec(Job(role="Actor", replicas=0))
    assert info.value.reason == "Invalid role name"
    assert "'Actor'" in info.value.details


@pytest.mark.parametrize("tasks", [[], None])
def test_no_tasks_gives_the_default_spec(tasks):
    resolved = resolve_spec(Job(role="rollout", replicas=2, tasks=tasks))
    assert (resolved.cpu, resolved.gpu, resolved.mem, resolved.port_count) == (1, 0, 1, 2)
    assert resolved.cmd == "python -m areal.infra.rpc.rpc_server"
    assert resolved.task_type == "worker"
    check_spec("rollout", resolved)  # the default must itself be deployable
    values = role_values(resolved, 2, KubernetesSchedulerConfig())
    assert values["resources"] == {"cpu": "1", "memory": "1Gi", "gpu": 0}
    assert values["extraPorts"] == 1
    assert values["command"] == ["python", "-m", "areal.infra.rpc.rpc_server"]
    assert "image" not in values


def test_one_spec_for_all_replicas():
    one = spec(cpu=3)
    assert resolve_spec(Job(role="actor", replicas=4, tasks=[one])) == one


def test_identical_specs_one_per_replica_accepted():
    tasks = [spec(gpu=1) for _ in range(3)]
    assert resolve_spec(Job(role="actor", replicas=3, tasks=tasks)) == spec(gpu=1)


def test_differing_specs_rejected_naming_the_indices():
    a, b = spec(), spec(gpu=1)
    with pytest.raises(TopologyError) as info:
        resolve_spec(Job(role="actor", replicas=5, tasks=[a, copy.deepcopy(a), b, a, spec(cpu=7)]))
    assert info.value.reason == "Invalid configuration"
    assert "workers [2, 4]" in info.value.details
    assert "worker 0" in info.value.details


@pytest.mark.parametrize("count,replicas", [(2, 3), (3, 2), (4, 1)])
def test_wrong_spec_count_message_is_areals(count, replicas):
    with pytest.raises(TopologyError) as info:
        resolve_spec(Job(role="actor", replicas=replicas, tasks=[spec() for _ in range(count)]))
    assert info.value.details == f"schedulings length ({count}) must be 1 or equal to replicas ({replicas})"
    assert info.value.reason == "Invalid configuration"
    assert info.value.worker_key == "actor"


def test_wrong_spec_count_exact_example():
    with pytest.raises(TopologyError) as info:
        resolve_spec(Job(role="test", replicas=3, tasks=[spec(), spec()]))
    assert info.value.details == "schedulings length (2) must be 1 or equal to replicas (3)"
    assert str(info.value) == (
        "test: Invalid configuration (schedulings length (2) must be 1 or equal to replicas (3))"
    )


# --- check_spec ---------------------------------------------------------------------------------

SLURM_FIELDS = [
    ("nodelist", "node-[1-4]", "node_selector"),
    ("exclude", "node-7", "affinity"),
    ("srun_additional_args", "--exclusive", "values_files"),
    ("mount", "/data:/data", "extraVolumes"),
]


@pytest.mark.parametrize("strategy", ["shared", "separate", "deferred"])
def test_ray_placement_strategy_is_accepted_and_ignored_as_by_areals_local_and_slurm_schedulers(strategy):
    # AReaL's RolloutController turns the default "shared" into "separate" on every rollout job.
    check_spec("rollout", spec(ray_placement_strategy=strategy))  # raises TopologyError when refused


@pytest.mark.parametrize("name,value,alternative", SLURM_FIELDS)
def test_slurm_only_fields_rejected_when_set(name, value, alternative):
    error = rejection("actor", spec(**{name: value}))
    assert error.reason == f"SchedulingSpec.{name} is Slurm-only"
    assert repr(value) in error.details
    assert alternative in error.details
    assert error.worker_key == "actor"


@pytest.mark.parametrize("name", [f[0] for f in SLURM_FIELDS])
def test_slurm_only_fields_at_their_default_are_accepted(name):
    default = getattr(SchedulingSpec(), name)
    check_spec("actor", spec(**{name: default}))


@pytest.mark.parametrize("name", ["nodelist", "exclude", "srun_additional_args", "mount"])
def test_slurm_only_fields_empty_are_accepted(name):
    check_spec("actor", spec(**{name: ""}))


def test_default_scheduling_spec_is_accepted_and_its_sif_image_ignored():
    default = SchedulingSpec()
    assert default.image == SIF_DEFAULT
    check_spec("actor", default)
    values = role_values(default, 1, KubernetesSchedulerConfig())
    assert "image" not in values
    assert values["resources"] == {"cpu": "8", "memory": "32Gi", "gpu": 0}


@pytest.mark.parametrize("image", ["/images/other.sif", "areal.sif", "/opt/images/areal", "/path"])
def test_file_images_rejected(image):
    error = rejection("actor", spec(image=image))
    assert error.reason == "Apptainer images are Slurm-only"
    assert repr(image) in error.details
    assert "KubernetesSchedulerConfig.image" in error.details


@pytest.mark.parametrize("image", ["", "repo :tag", "repo:tag "])
def test_empty_or_blank_images_rejected(image):
    assert rejection("actor", spec(image=image)).reason == "Invalid image"


SHA = "sha256:" + "0123456789abcdef" * 4
VALID_IMAGES = [
    "ghcr.io/inclusionai/areal-runtime:v1.0.4",
    "areal",
    "localhost:5000/areal",
    "localhost:5000/a/b",
    "localhost:5000",  # Docker Hub's "localhost" repository, tag 5000
    f"repo@{SHA}",
    f"registry.example.com/a/b:tag@{SHA}",
    "a_b/c__d",
    "a-b---c",
    "a.b/c",
    "Registry.Example.com:443/team/areal:V1_RC.2",  # host names may have uppercase, tags too
    "192.168.1.10:5000/areal:latest",
    "[::1]:5000/areal/runtime:v1",
    "a/b/c/d/e:" + "t" * 128,
    "r.io/" + "x" * 250,  # 255 characters of name
]


@pytest.mark.parametrize("image", VALID_IMAGES)
def test_container_images_accepted(image):
    check_spec("actor", spec(image=image))
    assert image_reference.image_reference_problem(image) is None


@pytest.mark.parametrize(
    "image,fragment",
    [
        ("UPPER/Case:1", "the repository path must be lowercase: use upper/case:1"),
        ("ghcr.io/InclusionAI/areal-runtime:v1", "must be lowercase: use ghcr.io/inclusionai/areal-runtime:v1"),
        ("Areal", "must be lowercase: use areal"),
        ("repo:tag:extra", "more than one ':' after the last '/'"),
        ("repo:tag:extra", "use repo:tag"),
        ("repo@sha256:short", "a sha256 digest is 64 lowercase hex digits, got 5 characters ('short')"),
        ("repo@" + SHA.upper().replace("SHA256", "sha256"), "got uppercase hex digits"),
        ("repo@sha512:" + "a" * 128, "the chart renders only sha256 digests"),
        ("repo@md5:" + "a" * 32, "unknown digest algorithm 'md5'"),
        ("repo@latest", "the digest 'latest' is not <algorithm>:<hex>"),
        ("repo@", "nothing follows '@'"),
        (f"a@b@{SHA}", "more than one '@'"),
        (":tag", "there is no repository name before the tag or digest"),
        (f"@{SHA}", "there is no repository name"),
        ("a//b", "empty path component ('//'): use a/b"),
        ("a/b/", "ends with '/': drop it (a/b)"),
        ("repo:" + "t" * 129, "the tag is 129 characters, at most 128"),
        ("repo:", "the tag after ':' is empty"),
        ("repo:-rc1", "must not start with '.' or '-'"),
        ("repo:v1+build", "may hold only letters, digits"),
        ("a___b", "the path component 'a___b' must be lowercase letters and digits"),
        ("a/-b", "the path component '-b'"),
        ("bad_host.io:5000/a", "the registry 'bad_host.io:5000' is not a host name"),
        ("ex.com:/a", "the registry 'ex.com:' is not a host name"),
        ("r.io/" + "x" * 251, "the repository name is 256 characters, at most 255"),
        ("0123456789abcdef" * 4, "a bare 64-hex image id is not a pullable reference"),
        ("a/é", "the path component 'é'"),
    ],
)
def test_invalid_image_references_rejected_saying_what_to_change(image, fragment):
    error = rejection("actor", spec(image=image))
    assert error.reason == "Invalid image"
    assert "is not a container image reference" in error.details
    assert fragment in error.details


def test_empty_image_keeps_its_message():
    error = rejection("actor", spec(image=""))
    assert "SchedulingSpec.image is empty" in error.details


def test_long_invalid_parts_are_shortened_in_the_message():
    error = rejection("actor", spec(image="repo@sha256:" + "f" * 5000))
    assert "got 5000 characters" in error.details
    assert len(error.details) < 800


def test_image_checks_agree_with_the_whole_grammar():
    """The step-by-step diagnosis accepts exactly what one anchored regex of the grammar (plus go-digest's sha256
    rule, the name length and the 64-hex id rule) accepts, over many random strings of the interesting characters."""
    import random
    import re

    full = re.compile(
        rf"({image_reference._NAME.pattern})(?::({image_reference._TAG.pattern}))?"
        rf"(?:@({image_reference._DIGEST.pattern}))?"
    )

    def grammar_ok(image: str) -> bool:
        match = full.fullmatch(image)
        if match is None or re.fullmatch(r"[a-f0-9]{64}", image):
            return False
        name, _, digest = match.groups()
        return len(name) <= 255 and (digest is None or re.fullmatch(r"sha256:[a-f0-9]{64}", digest) is not None)

    rng = random.Random(7)
    atoms = [*"aB0._-/:@[]", "__", "--", "localhost", "x.io", SHA]
    for _ in range(20000):
        image = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 10)))
        assert (image_reference.image_reference_problem(image) is None) == grammar_ok(image), image


def test_invalid_config_image_rejected_before_anything_is_written():
    with pytest.raises(TopologyError) as info:
        base_values(KubernetesSchedulerConfig(image="Registry/Areal:v1"), "e", "t")
    assert info.value.worker_key == "KubernetesSchedulerConfig.image"
    assert "must be lowercase" in info.value.details


def test_engine_task_type_rejected():
    error = rejection("actor", spec(task_type="engine"))
    assert error.reason == "Unsupported task_type"
    assert "'engine'" in error.details
    assert "create_engine" in error.details


@pytest.mark.parametrize(
    "fields,needle",
    [
        ({"cpu": 0}, "SchedulingSpec.cpu"),
        ({"cpu": -1}, "SchedulingSpec.cpu"),
        ({"mem": 0}, "SchedulingSpec.mem"),
        ({"mem": -4}, "SchedulingSpec.mem"),
        ({"gpu": -1}, "SchedulingSpec.gpu"),
        ({"gpu": 0.5}, "SchedulingSpec.gpu"),
        ({"gpu": 1.25}, "SchedulingSpec.gpu"),
        ({"port_count": 0}, "SchedulingSpec.port_count"),
        ({"port_count": -2}, "SchedulingSpec.port_count"),
        ({"cpu": "2"}, "SchedulingSpec.cpu"),
        ({"mem": None}, "SchedulingSpec.mem"),
        ({"gpu": True}, "SchedulingSpec.gpu"),
    ],
)
def test_invalid_resources_rejected(fields, needle):
    error = rejection("actor", spec(**fields))
    assert error.reason in ("Invalid resources", "Invalid configuration")
    assert needle in error.details


@pytest.mark.parametrize("fields", [{"cpu": 0.5}, {"mem": 0.5}, {"gpu": 2.0}, {"gpu": 8}, {"port_count": 1}])
def test_boundary_resources_accepted(fields):
    check_spec("actor", spec(**fields))


@pytest.mark.parametrize(
    "cmd", ["python -m areal.infra.rpc.rpc_server --port 8000", "python -m x --port=1", "server --port-range 1-2"]
)
def test_port_in_command_rejected_with_areal_reason(cmd):
    error = rejection("actor", spec(cmd=cmd))
    assert error.reason == "Custom command should not include --port argument"
    assert error.details == "The scheduler automatically allocates and provides the port."


@pytest.mark.parametrize("name", ["1ABC", "HAS SPACE", "A=B", "", "ÜML", "a$b"])
def test_invalid_env_names_rejected(name):
    error = rejection("actor", spec(env_vars={name: "x"}))
    assert error.reason == "Invalid env_vars"
    assert repr(name) in error.details


@pytest.mark.parametrize(
    "name",
    [
        "POD_NAME",
        "POD_NAMESPACE",
        "POD_IP",
        "AREAL_WORKER_INDEX",
        "AREAL_EXPERIMENT_NAME",
        "AREAL_TRIAL_NAME",
        "AREAL_ROLE",
        "AREAL_WORKER_ID",
    ],
)
def test_reserved_env_names_rejected(name):
    error = rejection("actor", spec(env_vars={"OK": "1", name: "x"}))
    assert error.reason == "Invalid env_vars"
    assert name in error.details


@pytest.mark.parametrize("name", ["my.var", "my-var", "_X", "lower", "A1"])
def test_valid_env_names_accepted(name):
    check_spec("actor", spec(env_vars={name: "v"}))


# --- no function mutates its inputs -------------------------------------------------------------


def _rich_spec() -> SchedulingSpec:
    return spec(
        cpu=2,
        gpu=1,
        mem=16,
        port_count=3,
        env_vars={"FOO": "bar", "OMP_NUM_THREADS": "1"},
        additional_bash_cmds=["pip install x"],
        cmd="/home/me/.venv/bin/python -m areal.infra.rpc.rpc_server",
    )


def test_resolve_spec_does_not_mutate():
    job = Job(role="actor", replicas=2, tasks=[_rich_spec(), _rich_spec()])
    before = copy.deepcopy(job)
    resolve_spec(job)
    assert job == before
    bad = Job(role="actor", replicas=3, tasks=[_rich_spec(), spec()])
    bad_before = copy.deepcopy(bad)
    with pytest.raises(TopologyError):
        resolve_spec(bad)
    assert bad == bad_before


def test_default_spec_is_a_fresh_object_each_time():
    first = resolve_spec(Job(role="actor", replicas=1))
    first.env_vars["X"] = "1"
    first.cpu = 99
    second = resolve_spec(Job(role="actor", replicas=1))
    assert second.env_vars == {} and second.cpu == 1


def test_check_spec_does_not_mutate():
    for value in (_rich_spec(), SchedulingSpec(), spec(nodelist="n1"), spec(env_vars={"POD_IP": "x"})):
        before = copy.deepcopy(value)
        try:
            check_spec("actor", value)
        except TopologyError:
            pass
        assert value == before


def test_role_values_and_worker_command_do_not_mutate():
    value = _rich_spec()
    before = copy.deepcopy(value)
    out = role_values(value, 2, KubernetesSchedulerConfig(python_executable="python3"))
    worker_command(value, "python3")
    assert value == before
    out["env"]["NEW"] = "1"
    out["setupCommands"].append("more")
    assert value.env_vars == before.env_vars
    assert value.additional_bash_cmds == before.additional_bash_cmds


def test_base_and_cluster_values_do_not_mutate():
    exp = _exp_config()
    exp_before = copy.deepcopy(exp)
    config = _full_config()
    config_before = copy.deepcopy(config)
    cluster = cluster_values(exp)
    cluster_before = copy.deepcopy(cluster)
    out = base_values(config, "exp", "trial", cluster)
    assert exp == exp_before
    assert config == config_before
    assert cluster == cluster_before
    out["cluster"]["nameResolve"]["type"] = "changed"
    out["workerDefaults"]["nodeSelector"]["x"] = "y"
    out["image"]["pullSecrets"].append("other")
    assert cluster == cluster_before
    assert config == config_before


# --- role_values --------------------------------------------------------------------------------


def test_role_values_exact():
    value = SchedulingSpec(
        cpu=2,
        gpu=1,
        mem=16,
        port_count=3,
        image="ghcr.io/x/areal:v1",
        cmd="/home/me/.venv/bin/python -m areal.infra.rpc.rpc_server",
        env_vars={"OMP_NUM_THREADS": "1", "FOO": "bar"},
        additional_bash_cmds=["pip install x", "echo ready"],
    )
    config = KubernetesSchedulerConfig(python_executable="/usr/bin/python3")
    assert role_values(value, 4, config) == {
        "replicas": 4,
        "command": ["/usr/bin/python3", "-m", "areal.infra.rpc.rpc_server"],
        "env": {
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "2",
            "OPENBLAS_NUM_THREADS": "2",
            "VECLIB_MAXIMUM_THREADS": "2",
            "NUMEXPR_NUM_THREADS": "2",
            "FOO": "bar",
        },
        "resources": {"cpu": "2", "memory": "16Gi", "gpu": 1},
        "extraPorts": 2,
        "setupCommands": ["pip install x", "echo ready"],
        "image": {"repository": "ghcr.io/x/areal", "tag": "v1"},
    }


def test_role_values_thread_variables_default_to_cpu():
    values = role_values(spec(cpu=6), 1, KubernetesSchedulerConfig())
    assert {name: values["env"][name] for name in THREAD_VARIABLES} == dict.fromkeys(THREAD_VARIABLES, "6")
    assert set(values["env"]) == set(THREAD_VARIABLES)


def test_role_values_env_values_become_strings():
    values = role_values(spec(env_vars={"N": 3, "FLAG": True}), 1, KubernetesSchedulerConfig())
    assert values["env"]["N"] == "3"
    assert values["env"]["FLAG"] == "True"


@pytest.mark.parametrize(
    "fields,resources",
    [
        ({"cpu": 0.5, "mem": 16}, {"cpu": "0.5", "memory": "16Gi", "gpu": 0}),
        ({"cpu": 2.0, "mem": 0.5, "gpu": 2.0}, {"cpu": "2", "memory": "0.5Gi", "gpu": 2}),
        ({"cpu": 64, "mem": 512, "gpu": 8}, {"cpu": "64", "memory": "512Gi", "gpu": 8}),
    ],
)
def test_role_values_resource_strings(fields, resources):
    values = role_values(spec(**fields), 1, KubernetesSchedulerConfig())
    assert values["resources"] == resources
    assert isinstance(values["resources"]["gpu"], int)


@pytest.mark.parametrize("cpu,expected", [(0.5, None), (1.5, None), (2.0, "2")])
def test_role_values_thread_variables_are_whole_numbers_for_fractional_cpu(cpu, expected):
    """OMP_NUM_THREADS & co. must be positive integers (numexpr does int() on NUMEXPR_NUM_THREADS at import,
    libgomp ignores anything else), even when the pod gets a fractional CPU quota."""
    values = role_values(spec(cpu=cpu), 1, KubernetesSchedulerConfig())
    for name in THREAD_VARIABLES:
        text = values["env"][name]
        assert text.isdigit() and int(text) >= 1, f"{name}={text!r} for cpu={cpu}"
        if expected is not None:
            assert text == expected


@pytest.mark.parametrize("port_count,extra", [(1, 0), (2, 1), (5, 4)])
def test_role_values_extra_ports(port_count, extra):
    assert role_values(spec(port_count=port_count), 1, KubernetesSchedulerConfig())["extraPorts"] == extra


def test_role_values_without_setup_commands_or_image():
    values = role_values(SchedulingSpec(cmd=DEFAULT_COMMAND), 3, KubernetesSchedulerConfig())
    assert "setupCommands" not in values
    assert "image" not in values
    assert values["replicas"] == 3


# --- worker_command -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cmd,expected",
    [
        ("python -m x", ["/img/python", "-m", "x"]),
        ("python3 -m x --flag 1", ["/img/python", "-m", "x", "--flag", "1"]),
        ("/usr/bin/python3.11 -m x", ["/img/python", "-m", "x"]),
        ("/opt/venv/bin/python", ["/img/python"]),
        ("bash -c 'echo hi && python -m x'", ["bash", "-c", "echo hi && python -m x"]),
        ("pythonista", ["pythonista"]),
        ("pythonista -m x", ["pythonista", "-m", "x"]),
        (None, ["/img/python", "-m", "areal.infra.rpc.rpc_server"]),
        ("", ["/img/python", "-m", "areal.infra.rpc.rpc_server"]),
    ],
)
def test_worker_command(cmd, expected):
    assert worker_command(SchedulingSpec(cmd=cmd), "/img/python") == expected


@pytest.mark.parametrize(
    "cmd,problem",
    [
        ("python -c 'print(1)", "No closing quotation"),
        ('bash -c "echo hi', "No closing quotation"),
        ("python -m x --flag \\", "No escaped character"),
    ],
)
def test_a_command_shlex_cannot_split_is_refused_naming_the_role_and_the_quote(cmd, problem):
    error = rejection("actor", spec(cmd=cmd))
    assert error.worker_key == "actor" and error.reason == "Invalid command"
    assert repr(cmd) in error.details and problem in error.details
    assert "close the quote or escape it" in error.details
    # worker_command, which `up` and `render` call without check_spec, refuses it the same way
    with pytest.raises(TopologyError) as raised:
        worker_command(spec(cmd=cmd), "/img/python")
    assert raised.value.reason == "Invalid command" and problem in raised.value.details


# --- split_image --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image,expected",
    [
        ("repo", {"repository": "repo", "tag": "latest"}),
        ("repo:tag", {"repository": "repo", "tag": "tag"}),
        ("host:5000/repo", {"repository": "host:5000/repo", "tag": "latest"}),
        ("host:5000/repo:tag", {"repository": "host:5000/repo", "tag": "tag"}),
        (f"repo@{SHA}", {"repository": "repo", "tag": SHA}),
        (f"r.io/a/b:v1@{SHA}", {"repository": "r.io/a/b:v1", "tag": SHA}),
        ("ghcr.io/org/sub/repo:v1.0.4", {"repository": "ghcr.io/org/sub/repo", "tag": "v1.0.4"}),
        ("localhost:5000", {"repository": "localhost", "tag": "5000"}),
    ],
)
def test_split_image(image, expected):
    assert split_image(image) == expected


def _chart_image_ref(repository: str, tag: str) -> str:
    """The chart's "areal-workers.imageRef" helper, in Python."""
    return f"{repository}@{tag}" if tag.startswith("sha256:") else f"{repository}:{tag}"


@pytest.mark.parametrize("image", VALID_IMAGES)
def test_split_image_renders_back_to_the_same_reference(image):
    """No tag means :latest (the same image); an empty tag would make the chart use the release's tag instead."""
    parts = split_image(image)
    assert parts["tag"], "an empty tag falls back to image.tag or v<appVersion> in the chart"
    rendered = _chart_image_ref(parts["repository"], parts["tag"])
    assert rendered == (image if ":" in image.rsplit("/", 1)[-1] or "@" in image else f"{image}:latest")


def test_image_ref_helper_is_what_the_chart_does():
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert '{{- if hasPrefix "sha256:" .tag -}}\n{{- printf "%s@%s" .repository .tag -}}' in helpers
    assert '{{- printf "%s:%s" .repository .tag -}}' in helpers


def test_split_image_digest_renders_back_as_a_digest_in_the_chart():
    """The chart's imageRef turns a "sha256:" tag into "repo@sha256:..."; split_image must put the digest there."""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert 'hasPrefix "sha256:" .tag' in helpers
    assert split_image("r.io/a/b@sha256:" + "f" * 64)["tag"].startswith("sha256:")


# --- base_values and cluster_values -------------------------------------------------------------


def _full_config() -> KubernetesSchedulerConfig:
    return KubernetesSchedulerConfig(
        image="registry.local:5000/areal/runtime:v1.0.4",
        image_pull_policy="Always",
        image_pull_secrets=("regcred", "other"),
        node_selector={"pool": "gpu", "zone": "a"},
        termination_grace_seconds=30,
        service_account="areal-workers",
        guard_port=9100,
    )


def _exp_config(**name_resolve) -> SimpleNamespace:
    resolve = {"type": "etcd3", "nfs_record_root": "/shared/name_resolve", "etcd3_addr": "etcd.infra:2379"}
    resolve.update(name_resolve)
    return SimpleNamespace(
        experiment_name="exp",
        trial_name="trial0",
        cluster=SimpleNamespace(fileroot="/shared/areal", name_resolve=SimpleNamespace(**resolve)),
    )


def test_base_values_every_config_field():
    cluster = cluster_values(_exp_config())
    assert base_values(_full_config(), "exp", "trial0", cluster) == {
        "experiment": "exp",
        "trial": "trial0",
        "guard": {"port": 9100},
        "image": {
            "repository": "registry.local:5000/areal/runtime",
            "tag": "v1.0.4",
            "pullPolicy": "Always",
            "pullSecrets": ["regcred", "other"],
        },
        "workerDefaults": {"nodeSelector": {"pool": "gpu", "zone": "a"}, "terminationGracePeriodSeconds": 30},
        "serviceAccount": {"create": False, "name": "areal-workers"},
        "cluster": {
            "fileroot": "/shared/areal",
            "nameResolve": {"type": "etcd3", "nfsRecordRoot": "/shared/name_resolve", "etcd3Addr": "etcd.infra:2379"},
        },
    }


def test_base_values_defaults_only():
    assert base_values(KubernetesSchedulerConfig(), "e", "t") == {
        "experiment": "e",
        "trial": "t",
        "guard": {"port": 8000},
    }


def test_base_values_zero_termination_grace_is_kept():
    values = base_values(KubernetesSchedulerConfig(termination_grace_seconds=0), "e", "t")
    assert values["workerDefaults"] == {"terminationGracePeriodSeconds": 0}


def test_base_values_pull_policy_without_image():
    values = base_values(KubernetesSchedulerConfig(image_pull_policy="Never"), "e", "t")
    assert values["image"] == {"pullPolicy": "Never"}


def test_cluster_values_from_exp_config():
    assert cluster_values(_exp_config(type="nfs")) == {
        "fileroot": "/shared/areal",
        "nameResolve": {"type": "nfs", "nfsRecordRoot": "/shared/name_resolve", "etcd3Addr": "etcd.infra:2379"},
    }


def test_cluster_values_path_fileroot_and_missing_parts():
    exp = SimpleNamespace(cluster=SimpleNamespace(fileroot=Path("/data/areal"), name_resolve=None))
    assert cluster_values(exp) == {"fileroot": "/data/areal"}
    assert cluster_values(SimpleNamespace()) == {}
    assert cluster_values(None) == {}
    assert cluster_values(
        SimpleNamespace(
            cluster=SimpleNamespace(
                fileroot="", name_resolve=SimpleNamespace(type="nfs", nfs_record_root=None, etcd3_addr="")
            )
        )
    ) == {"nameResolve": {"type": "nfs"}}


# --- the values these functions produce are valid values of the chart ----------------------------


def test_produced_values_validate_against_the_chart_schema():
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    config = _full_config()
    exp = _exp_config(type="nfs")
    roles = {
        "actor": role_values(_rich_spec(), 2, config),
        "rollout": role_values(resolve_spec(Job(role="rollout", replicas=3)), 3, config),
        "ref_model": role_values(spec(cpu=0.5, mem=0.5, image="r.io/a@sha256:" + "a" * 64), 1, config),
    }
    values = merge_values(defaults, base_values(config, "exp", "trial0", cluster_values(exp)), {"roles": roles})
    jsonschema.Draft7Validator(schema).validate(values)


def test_enable_offload_preloads_torch_memory_saver_in_every_role():
    """AReaL's schedulers add get_tms_env_vars() to every worker when exp_config.enable_offload is set; the chart's
    workerDefaults.offload does it in the pods (tests/chart/test_worker_env.py)."""
    values = base_values(KubernetesSchedulerConfig(), "exp", "trial0", offload=True)
    assert values["workerDefaults"]["offload"] == {"enabled": True}
    assert "workerDefaults" not in base_values(KubernetesSchedulerConfig(), "exp", "trial0")
