"""`python -m areal_workers.launch`: what it accepts, what it refuses before the entry point runs, and how it runs a
script or a module (as Python would: `__main__`, their own argv). With AReaL installed, the launcher's whole path
(AReaL's config parser, AReaL's trainer choosing the scheduler, workers on the local cluster) runs in
tests/integration/test_launch_on_cluster.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from areal_workers import launch
from areal_workers.trainer.job import TrainerSpec, launched, trainer_job


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train.py", "--config", "x.yaml"], (None, "train.py", ["--config", "x.yaml"])),
        (
            ["-m", "areal.examples.gsm8k", "scheduler.type=kubernetes"],
            ("areal.examples.gsm8k", None, ["scheduler.type=kubernetes"]),
        ),
    ],
)
def test_a_script_or_a_module_with_its_own_arguments(argv, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert launch.parse(argv) == expected


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "usage: python -m areal_workers.launch SCRIPT.py"),
        (["-m"], "-m needs a module name"),
        (["-m", "--config"], "-m needs a module name"),
        (["-u", "train.py"], "unknown option -u"),
        (["missing.py"], "no such script: missing.py"),
    ],
)
def test_bad_invocations_say_what_to_change(argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(launch.LaunchError, match=message):
        launch.parse(argv)


def run(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "areal_workers.launch", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def test_invalid_settings_stop_it_before_the_script_runs(tmp_path):
    script = tmp_path / "train.py"
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    result = run([str(script)], env={"PATH": "/usr/bin:/bin", "AREAL_K8S_FORK_MODE": "thread"})
    assert result.returncode == 2, result
    assert (
        "areal_workers.launch: the AREAL_K8S_* settings are invalid: fork_mode must be 'process' or 'pod'"
        in result.stderr
    )
    assert not marker.exists()


def test_without_areal_it_names_the_interpreter_and_runs_nothing(tmp_path):
    """The test interpreter (the project's virtualenv) has no AReaL; test_launch_on_cluster.py runs the launcher in
    AReaL's environment."""
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit(7)\n")
    result = run([str(script)])
    assert result.returncode == 2
    assert f"AReaL's trainers cannot be imported by {sys.executable}" in result.stderr


def test_the_script_runs_as_main_with_its_own_argv_and_directory_first(tmp_path):
    """The trainer registration needs AReaL; here a stand-in `areal` package with one trainer class shows what the
    launcher does around it."""
    fake = tmp_path / "site" / "areal" / "trainer"
    fake.mkdir(parents=True)
    for init in (tmp_path / "site" / "areal" / "__init__.py", fake / "__init__.py"):
        init.write_text("")
    (fake / "sft_trainer.py").write_text(
        "class SFTTrainer:\n    def _init_scheduler(self):\n        raise "
        "NotImplementedError('Unknown scheduler type')\n"
    )
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "helper_module.py").write_text("VALUE = 'found beside the script'\n")
    (scripts / "train.py").write_text(
        "import json, sys\nimport helper_module\nfrom areal.trainer.sft_trainer import SFTTrainer\n"
        "print(json.dumps({'name': __name__, 'argv': sys.argv, 'helper': helper_module.VALUE,\n"
        "                  'wrapped': getattr(SFTTrainer._init_scheduler, '__areal_workers_wrapped__', False)}))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site")}
    result = run([str(scripts / "train.py"), "--config", "x.yaml", "scheduler.type=kubernetes"], env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen == {
        "name": "__main__",
        "argv": [str(scripts / "train.py"), "--config", "x.yaml", "scheduler.type=kubernetes"],
        "helper": "found beside the script",
        "wrapped": True,
    }


def test_a_module_runs_as_python_m_runs_it(tmp_path):
    site = tmp_path / "site"
    (site / "areal" / "trainer").mkdir(parents=True)
    (site / "areal" / "__init__.py").write_text("")
    (site / "areal" / "trainer" / "__init__.py").write_text("")
    (site / "areal" / "trainer" / "rl_trainer.py").write_text(
        "class PPOTrainer:\n    def _init_scheduler(self):\n        pass\n"
    )
    (site / "my_trainer.py").write_text(
        "import sys\nif __name__ == '__main__':\n    print(sys.argv[1:])\n    raise SystemExit(3)\n"
    )
    result = run(["-m", "my_trainer", "a", "b"], env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
    assert result.returncode == 3 and result.stdout.strip() == "['a', 'b']", result


@pytest.mark.parametrize(
    "command, expected",
    [
        (
            ["python", "train.py", "--config", "x.yaml"],
            ["python", "-m", "areal_workers.launch", "train.py", "--config", "x.yaml"],
        ),
        (
            ["python3", "-u", "-m", "my.trainer", "a"],
            ["python3", "-u", "-m", "areal_workers.launch", "-m", "my.trainer", "a"],
        ),
        (["/usr/bin/python3.11", "t.py"], ["/usr/bin/python3.11", "-m", "areal_workers.launch", "t.py"]),
        (["python", "-m", "areal_workers.launch", "t.py"], ["python", "-m", "areal_workers.launch", "t.py"]),
        (["python", "-c", "print(1)"], ["python", "-c", "print(1)"]),
        (["bash", "-c", "python train.py"], ["bash", "-c", "python train.py"]),
    ],
)
def test_submit_runs_python_entry_points_through_the_launcher(command, expected):
    assert launched(command) == expected


def test_a_submit_file_may_turn_the_launcher_off():
    job = trainer_job(TrainerSpec(image="example.com/t:1", launcher=False), ["python", "train.py"], "rl")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "train.py"]
    job = trainer_job(TrainerSpec(image="example.com/t:1"), ["python", "train.py"], "rl")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][:3] == ["python", "-m", "areal_workers.launch"]
