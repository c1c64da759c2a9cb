import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from areal_workers import areal_types, errors, trainer_hook
from areal_workers.errors import (
    EngineCallError,
    EngineCreationError,
    EngineImportError,
    GPUAllocationError,
    PortAllocationError,
    RPCConnectionError,
    SchedulerError,
    WorkerConfigurationError,
    WorkerCreationError,
    WorkerFailedError,
    WorkerNotFoundError,
    WorkerTimeoutError,
    attach_diagnosis,
)
from repo_paths import REPO

ADAPTER = REPO / "adapter"

TRAINER_MODULE = """
class {name}:
    def __init__(self, config):
        self.config = config

    def _init_scheduler(self):
        cfg = self.config.scheduler
        if cfg.type == "local":
            return "local"
        raise NotImplementedError(f"Unknown scheduler type: {{cfg.type}}")
"""


# AReaL 1.0.4's trainers: areal/trainer/<module>.py defines <class>.
AREAL_TRAINERS = {
    "rl_trainer": "PPOTrainer",
    "sft_trainer": "SFTTrainer",
    "rw_trainer": "RWTrainer",
    "dpo_trainer": "DPOTrainer",
}


def make_fake_areal(root: Path, modules: tuple[str, ...] = ("rl_trainer", "sft_trainer")) -> Path:
    """A package named `areal` with the trainers of `modules` only (by default PPOTrainer and SFTTrainer: no
    rw/dpo trainers, no areal.api, no areal.infra), written under root and only ever imported in subprocesses."""
    trainer = root / "areal" / "trainer"
    trainer.mkdir(parents=True)
    (root / "areal" / "__init__.py").write_text("")
    (trainer / "__init__.py").write_text("")
    for module in modules:
        (trainer / f"{module}.py").write_text(TRAINER_MODULE.format(name=AREAL_TRAINERS[module]))
    return root


@pytest.fixture
def fake_areal(tmp_path: Path) -> Path:
    return make_fake_areal(tmp_path / "fake")


def run_python(script: str, pythonpath: list[Path]) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(pythonpath[0]),
    )


def json_result(process: subprocess.CompletedProcess) -> dict:
    assert process.returncode == 0, f"exit {process.returncode}\nstdout:\n{process.stdout}\nstderr:\n{process.stderr}"
    return json.loads(process.stdout.strip().splitlines()[-1])


# --- importing areal_workers next to a package named `areal` that is not (all of) AReaL ------------


def test_package_imports_and_falls_back_when_areal_lacks_the_scheduler_modules(fake_areal):
    """An importable `areal` without areal.api.scheduler_api / areal.infra.scheduler.exceptions (an older or
    partial AReaL, or an unrelated package of that name) must not break `import areal_workers`: areal_types.py and
    errors.py fall back to their own classes."""
    process = run_python(
        """
        import json
        import areal  # the fake one is importable
        import areal_workers
        from areal_workers import areal_types, errors
        print(json.dumps({
            "areal": areal.__file__,
            "types": areal_types.USING_AREAL_TYPES,
            "exceptions": errors.USING_AREAL_EXCEPTIONS,
            "cpu": areal_types.SchedulingSpec().cpu,
            "message": str(errors.WorkerCreationError("actor", "boom")),
        }))
    """,
        [fake_areal, ADAPTER],
    )
    result = json_result(process)
    assert result["areal"].startswith(str(fake_areal))
    assert result["types"] is False
    assert result["exceptions"] is False
    assert result["cpu"] == 8
    assert result["message"] == "Failed to create worker 'actor': boom"


def test_errors_module_alone_falls_back_when_areal_lacks_exceptions(fake_areal):
    process = run_python(
        f"""
        import importlib.util, json
        spec = importlib.util.spec_from_file_location("aw_errors", {str(ADAPTER / "areal_workers" / "errors.py")!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        error = module.WorkerNotFoundError("actor/0")
        print(json.dumps({{"using": module.USING_AREAL_EXCEPTIONS, "message": str(error),
                          "base": isinstance(error, module.SchedulerError)}}))
    """,
        [fake_areal],
    )
    assert json_result(process) == {"using": False, "message": "Worker 'actor/0' not found", "base": True}


# --- register_with_areal against fake trainers ----------------------------------------------------

REGISTER_SCRIPT = """
import importlib, json, sys, types

# areal_workers is imported before the fake `areal` is importable, so these checks do not depend on how
# areal_workers.types behaves next to an incomplete AReaL (covered by its own test).
import areal_workers.scheduler as scheduler_module

calls = []


class RecordingScheduler:
    def __init__(self, *args, **kwargs):
        calls.append((args, kwargs))


scheduler_module.KubernetesScheduler = RecordingScheduler
sys.path.insert(0, sys.argv[1])
importlib.invalidate_caches()

from areal_workers.trainer_hook import register_with_areal

first = register_with_areal()
from areal.trainer.rl_trainer import PPOTrainer
from areal.trainer.sft_trainer import SFTTrainer
wrapped_once = {cls.__name__: cls._init_scheduler for cls in (PPOTrainer, SFTTrainer)}
second = register_with_areal()


def config(kind):
    return types.SimpleNamespace(scheduler=types.SimpleNamespace(type=kind), experiment_name="exp",
                                 trial_name="trial0")


out = {"first": first, "second": second, "trainers": {}}
for cls in (PPOTrainer, SFTTrainer):
    result = {"same_wrapper": cls._init_scheduler is wrapped_once[cls.__name__],
              "name": cls._init_scheduler.__name__,
              "inner_is_original": not getattr(cls._init_scheduler.__wrapped__, "__areal_workers_wrapped__", False)}
    result["local"] = cls(config("local"))._init_scheduler()
    for kind in ("kubernetes", "k8s"):
        calls.clear()
        cfg = config(kind)
        made = cls(cfg)._init_scheduler()
        result[kind] = {"type": type(made).__name__, "calls": len(calls),
                        "args": len(calls[0][0]) if calls else None,
                        "kwargs": sorted(calls[0][1]) if calls else None,
                        "same_config": bool(calls) and calls[0][1].get("exp_config") is cfg}
    for kind in ("slurm", None, "Kubernetes"):
        calls.clear()
        try:
            cls(config(kind))._init_scheduler()
            result[str(kind)] = "no error"
        except NotImplementedError as error:
            result[str(kind)] = f"NotImplementedError: {error}" + (" (scheduler built)" if calls else "")
    out["trainers"][cls.__name__] = result
out["rw_dpo_importable"] = [name for name in ("areal.trainer.rw_trainer", "areal.trainer.dpo_trainer")
                            if importlib.util.find_spec(name) is not None]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def registered(tmp_path_factory) -> dict:
    fake_areal = make_fake_areal(tmp_path_factory.mktemp("fake"))
    process = subprocess.run(
        [sys.executable, "-c", REGISTER_SCRIPT, str(fake_areal)],
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(ADAPTER)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(fake_areal.parent),
    )
    return json_result(process)


def test_register_returns_the_importable_trainers(registered):
    assert registered["first"] == ["PPOTrainer", "SFTTrainer"]
    assert registered["rw_dpo_importable"] == []


def test_register_twice_is_idempotent(registered):
    assert registered["second"] == ["PPOTrainer", "SFTTrainer"]
    for result in registered["trainers"].values():
        assert result["same_wrapper"] is True
        assert result["inner_is_original"] is True
        assert result["name"] == "_init_scheduler"


@pytest.mark.parametrize("trainer", ["PPOTrainer", "SFTTrainer"])
def test_other_types_still_reach_areals_code(registered, trainer):
    result = registered["trainers"][trainer]
    assert result["local"] == "local"
    assert result["slurm"] == "NotImplementedError: Unknown scheduler type: slurm"
    assert result["None"] == "NotImplementedError: Unknown scheduler type: None"
    assert result["Kubernetes"] == "NotImplementedError: Unknown scheduler type: Kubernetes"


@pytest.mark.parametrize("trainer", ["PPOTrainer", "SFTTrainer"])
@pytest.mark.parametrize("kind", ["kubernetes", "k8s"])
def test_kubernetes_types_build_the_scheduler_with_the_trainer_config(registered, trainer, kind):
    assert registered["trainers"][trainer][kind] == {
        "type": "RecordingScheduler",
        "calls": 1,
        "args": 0,
        "kwargs": ["exp_config"],
        "same_config": True,
    }


def test_register_without_areal_patches_nothing():
    assert sys.modules.get("areal") is None
    assert trainer_hook.register_with_areal() == []


EVERY_TRAINER_SCRIPT = """
import importlib, json, sys, types

import areal_workers.scheduler as scheduler_module


class RecordingScheduler:
    def __init__(self, *args, **kwargs):
        pass


scheduler_module.KubernetesScheduler = RecordingScheduler
sys.path.insert(0, sys.argv[1])
importlib.invalidate_caches()

from areal_workers.trainer_hook import register_with_areal

patched = register_with_areal()
config = types.SimpleNamespace(scheduler=types.SimpleNamespace(type="kubernetes"))
built = {}
for module, name in json.loads(sys.argv[2]).items():
    trainer = getattr(importlib.import_module(f"areal.trainer.{module}"), name)
    built[name] = type(trainer(config)._init_scheduler()).__name__
print(json.dumps({"patched": patched, "built": built}))
"""


def test_register_patches_all_four_of_areals_trainers(tmp_path):
    """With every trainer module of AReaL importable (PPO, SFT, RW, DPO), each one builds our scheduler."""
    fake_areal = make_fake_areal(tmp_path / "fake", tuple(AREAL_TRAINERS))
    process = subprocess.run(
        [sys.executable, "-c", EVERY_TRAINER_SCRIPT, str(fake_areal), json.dumps(AREAL_TRAINERS)],
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(ADAPTER)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    result = json_result(process)
    assert result["patched"] == ["PPOTrainer", "SFTTrainer", "RWTrainer", "DPOTrainer"]
    assert result["built"] == {name: "RecordingScheduler" for name in AREAL_TRAINERS.values()}


# --- the fallback exceptions: AReaL's exact messages and attributes -------------------------------


def test_running_without_areal():
    assert errors.USING_AREAL_EXCEPTIONS is False
    assert areal_types.USING_AREAL_TYPES is False
    assert areal_types.AREAL_SCHEDULER_BASE is object


@pytest.mark.parametrize(
    "error,message,attributes",
    [
        (
            WorkerCreationError("actor", "Worker group already exists"),
            "Failed to create worker 'actor': Worker group already exists",
            {"worker_key": "actor", "reason": "Worker group already exists", "details": ""},
        ),
        (
            WorkerCreationError("actor", "Invalid configuration", "replicas must be greater than 0"),
            "Failed to create worker 'actor': Invalid configuration\nDetails: replicas must be greater than 0",
            {"worker_key": "actor", "reason": "Invalid configuration", "details": "replicas must be greater than 0"},
        ),
        (
            WorkerConfigurationError("actor/0", "bad seed"),
            "Failed to configure worker 'actor/0': bad seed",
            {"worker_key": "actor/0", "reason": "bad seed", "details": ""},
        ),
        (
            WorkerConfigurationError("actor/0", "bad seed", "400"),
            "Failed to configure worker 'actor/0': bad seed\nDetails: 400",
            {"worker_key": "actor/0", "reason": "bad seed", "details": "400"},
        ),
        (
            WorkerFailedError("actor/0", 137),
            "Worker 'actor/0' failed with exit code 137",
            {"worker_id": "actor/0", "exit_code": 137, "stderr": ""},
        ),
        (
            WorkerFailedError("actor/0", 1, "Traceback...\nOOM"),
            "Worker 'actor/0' failed with exit code 1\nStderr output:\nTraceback...\nOOM",
            {"worker_id": "actor/0", "exit_code": 1, "stderr": "Traceback...\nOOM"},
        ),
        (WorkerNotFoundError("nonexistent"), "Worker 'nonexistent' not found", {"worker_id": "nonexistent"}),
        (
            EngineCreationError("actor/0", "Request timed out"),
            "Failed to create engine on worker 'actor/0': Request timed out",
            {"worker_id": "actor/0", "reason": "Request timed out", "status_code": None},
        ),
        (
            EngineCreationError("actor/0", "boom", 500),
            "Failed to create engine on worker 'actor/0': boom (HTTP 500)",
            {"worker_id": "actor/0", "reason": "boom", "status_code": 500},
        ),
        (
            EngineCreationError("actor/0", "boom", 0),
            "Failed to create engine on worker 'actor/0': boom",
            {"worker_id": "actor/0", "reason": "boom", "status_code": 0},
        ),
        (
            EngineCallError("actor/0", "train_batch", "bad input"),
            "Failed to call method 'train_batch' on worker 'actor/0': bad input",
            {"worker_id": "actor/0", "method": "train_batch", "reason": "bad input", "attempt": 1},
        ),
        (
            EngineCallError("actor/0", "train_batch", "Service unavailable", 3),
            "Failed to call method 'train_batch' on worker 'actor/0': Service unavailable (after 3 attempts)",
            {"worker_id": "actor/0", "method": "train_batch", "reason": "Service unavailable", "attempt": 3},
        ),
        (
            EngineCallError("actor/0", "m", "Max retries exceeded", 0),
            "Failed to call method 'm' on worker 'actor/0': Max retries exceeded",
            {"attempt": 0},
        ),
        (
            WorkerTimeoutError("actor", 5.0),
            "Timeout waiting for worker 'actor' (waited 5.0s)",
            {"worker_key": "actor", "timeout": 5.0},
        ),
        (
            WorkerTimeoutError("actor", 30),
            "Timeout waiting for worker 'actor' (waited 30s)",
            {"worker_key": "actor", "timeout": 30},
        ),
        (PortAllocationError("no free port"), "Failed to allocate ports: no free port", {"reason": "no free port"}),
        (
            GPUAllocationError("need 8, have 4"),
            "Failed to allocate GPU resources: need 8, have 4",
            {"reason": "need 8, have 4"},
        ),
        (
            RPCConnectionError("actor/0", "10.0.0.7", 8000, "refused"),
            "Failed to connect to worker 'actor/0' at 10.0.0.7:8000: refused",
            {"worker_id": "actor/0", "host": "10.0.0.7", "port": 8000, "reason": "refused"},
        ),
        (
            EngineImportError("my.mod.Engine", "No module named 'my'"),
            "Failed to import engine 'my.mod.Engine': No module named 'my'",
            {"import_path": "my.mod.Engine", "reason": "No module named 'my'"},
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None,
)
def test_exception_messages_are_areals(error, message, attributes):
    assert str(error) == message
    for name, value in attributes.items():
        assert getattr(error, name) == value, name
    assert isinstance(error, SchedulerError)
    assert type(error).__name__ in errors.__all__


def test_exception_hierarchy_is_areals():
    for cls in (
        WorkerCreationError,
        WorkerConfigurationError,
        WorkerFailedError,
        WorkerNotFoundError,
        EngineCreationError,
        EngineCallError,
        WorkerTimeoutError,
        PortAllocationError,
        GPUAllocationError,
        RPCConnectionError,
        EngineImportError,
    ):
        assert cls.__bases__ == (SchedulerError,), cls
    assert SchedulerError.__bases__ == (Exception,)
    assert not issubclass(EngineImportError, EngineCreationError)


def test_exceptions_keep_their_constructor_arguments_by_keyword():
    error = WorkerCreationError(worker_key="actor", reason="r", details="d")
    assert (error.worker_key, error.reason, error.details) == ("actor", "r", "d")
    error = EngineCallError(worker_id="w/0", method="m", reason="r", attempt=2)
    assert str(error).endswith("(after 2 attempts)")


def test_attach_diagnosis():
    error = WorkerFailedError("actor/0", 137, "killed")
    diagnosis = "pod aw-exp-t-actor-0: container worker OOMKilled (limit 16Gi)"
    returned = attach_diagnosis(error, diagnosis)
    assert returned is error
    assert error.diagnosis == diagnosis
    assert error.__notes__ == [diagnosis]
    assert str(error) == "Worker 'actor/0' failed with exit code 137\nStderr output:\nkilled"  # unchanged
    assert error.exit_code == 137


def test_attach_diagnosis_shows_in_the_traceback():
    import traceback

    try:
        raise attach_diagnosis(WorkerTimeoutError("actor", 5.0), "2 of 4 pods Pending: Unschedulable")
    except WorkerTimeoutError as caught:
        text = "".join(traceback.format_exception(caught))
    assert "2 of 4 pods Pending: Unschedulable" in text
    assert "Timeout waiting for worker 'actor' (waited 5.0s)" in text


def test_attach_diagnosis_works_on_any_exception():
    error = attach_diagnosis(ValueError("x"), "why")
    assert error.diagnosis == "why" and error.__notes__ == ["why"]


# --- the fallback data classes: AReaL's fields and defaults ---------------------------------------


def test_scheduling_spec_fields_and_defaults_are_areals():
    expected = {
        "cpu": 8,
        "gpu": 0,
        "mem": 32,
        "port_count": 2,
        "image": "/storage/openpsi/images/areal-latest.sif",
        "task_type": "worker",
        "env_vars": {},
        "cmd": None,
        "srun_additional_args": "--unbuffered --mpi=pmi2 -K --chdir $PWD",
        "additional_bash_cmds": None,
        "container_type": "apptainer",
        "mount": "/storage:/storage",
        "nodelist": None,
        "exclude": None,
        "ray_placement_strategy": "shared",
    }
    spec = areal_types.SchedulingSpec()
    assert [f.name for f in dataclasses.fields(areal_types.SchedulingSpec)] == list(expected)
    assert dataclasses.asdict(spec) == expected
    assert areal_types.SchedulingSpec().env_vars is not spec.env_vars


def test_scheduling_spec_validates_ray_placement_strategy():
    for value in ("shared", "separate", "deferred"):
        areal_types.SchedulingSpec(ray_placement_strategy=value)
    with pytest.raises(ValueError):
        areal_types.SchedulingSpec(ray_placement_strategy="spread")


def test_job_worker_strategy_are_areals():
    job = areal_types.Job(role="actor")
    assert (job.replicas, job.tasks) == (0, [])
    assert job.scheduling_strategy == areal_types.SchedulingStrategy(type="separation", target=None, fork=True)
    assert areal_types.Job(role="b").tasks is not job.tasks
    assert [f.name for f in dataclasses.fields(areal_types.Job)] == ["role", "replicas", "tasks", "scheduling_strategy"]
    worker = areal_types.Worker(id="actor/0", ip="10.0.0.1")
    assert (worker.worker_ports, worker.engine_ports) == ([], [])
    assert [f.name for f in dataclasses.fields(areal_types.Worker)] == ["id", "ip", "worker_ports", "engine_ports"]
