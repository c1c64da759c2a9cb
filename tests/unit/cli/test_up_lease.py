"""`areal-workers up` makes a person's release: its scheduler takes no Lease (nobody would renew it once `up`
exits, and a reaper would remove the workers after the grace), and a trainer's release (one with a Lease) is
refused."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from test_cli_names import job_file  # noqa: F401 (a fixture)

from areal_workers.cli.commands import up
from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_USAGE, CliError
from areal_workers.runtime.lease import lease_body
from memory_backend import MemoryLeases


def test_up_builds_its_scheduler_without_a_lease(job_file, tmp_path, monkeypatch):  # noqa: F811
    helm = tmp_path / "bin" / "helm"  # up checks for helm before it starts the scheduler
    helm.parent.mkdir()
    helm.write_text("#!/bin/sh\nprintf v3.19.0\n")
    helm.chmod(0o755)
    monkeypatch.setenv("PATH", str(helm.parent))
    monkeypatch.setenv("AREAL_K8S_LEASE_GRACE_SECONDS", "300")
    seen = {}

    class Stop(Exception):
        pass

    def scheduler(config, experiment_name, trial_name):
        seen["grace"] = config.lease_grace_seconds
        raise Stop

    monkeypatch.setattr(up, "KubernetesScheduler", scheduler)
    with pytest.raises(Stop):
        main(["up", "-f", str(job_file)])
    assert seen == {"grace": 0}


def test_up_refuses_a_trainers_release_and_accepts_one_without_a_lease(monkeypatch):
    leases = MemoryLeases()
    monkeypatch.setattr(up.client, "CoordinationV1Api", lambda api: leases)
    session = SimpleNamespace(api=None, namespace="rl")
    up.refuse_trainers_release(session, "aw-mine")  # no Lease: a person's (or nobody's yet)
    leases.create_namespaced_lease("rl", lease_body("aw-mine", "laptop/1/ab12", 300, datetime.now(UTC)))
    with pytest.raises(CliError) as refused:
        up.refuse_trainers_release(session, "aw-mine")
    assert refused.value.exit_code == EXIT_USAGE and "laptop/1/ab12" in str(refused.value)
