"""One life of a trainer of a trial, for tests/integration/test_trainer_restart.py, in AReaL's environment: AReaL's
TrainController.initialize for "actor" (2 workers, engines, a gloo group across the pods) and for "ref" (a process
fork in the actor's pods, colocation with fork=True), then one all-reduced update. The first life prints what it saw
and dies by SIGKILL, as an OOM-killed or preempted trainer does (no clean-up, its Lease left unrenewed). The second
life (the same experiment and trial, a new process) does the same work on the same release, prints what it saw with
the pods as they are, then destroys both roles.

    python trainer_restart_run.py SETTINGS.json    (KubernetesSchedulerConfig fields, plus "trial", "cpu", "life")
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from areal.api.cli_args import SchedulingStrategy

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig, SchedulingSpec, naming
from bandit_config import BanditExperimentConfig
from bandit_engines import PolicyActor, ReferencePolicy
from bandit_training import PolicyController, ReferenceController, train_engine_config
from train_controller_run import batch_item


def pods(scheduler: KubernetesScheduler) -> dict[str, dict]:
    listed, _ = scheduler.finder.pods.list(naming.release_selector(scheduler.release))
    return {
        pod.metadata.name: {
            "uid": pod.metadata.uid,
            "node": pod.spec.node_name,
            "restarts": sum(s.restart_count or 0 for s in pod.status.container_statuses or []),
        }
        for pod in listed
    }


def main(settings_file: str) -> None:
    settings = json.loads(open(settings_file).read())
    trial, cpu, life = settings.pop("trial"), settings.pop("cpu"), settings.pop("life")
    exp = BanditExperimentConfig(experiment_name="tr", trial_name=trial, n_arms=4)
    started = time.monotonic()
    scheduler = KubernetesScheduler(
        experiment_name="tr", trial_name=trial, config=KubernetesSchedulerConfig(**settings)
    )
    spec = SchedulingSpec(cpu=cpu, gpu=0, mem=2, port_count=2, cmd="python -m areal.infra.rpc.rpc_server")
    actor = PolicyController(PolicyActor, train_engine_config(exp, spec), scheduler)
    actor.initialize(role="actor", ft_spec=None, n_arms=4, learning_rate=1.0, kl_coef=0.0, seed=7)
    strategy = SchedulingStrategy(type="colocation", target="actor", fork=True)
    ref = ReferenceController(ReferencePolicy, train_engine_config(exp, spec, strategy), scheduler)
    ref.initialize(role="ref", ft_spec=None, weights=actor.get_weights())
    ready = time.monotonic() - started
    batch = [batch_item([0, 0, 1, 2], [1.0, 1.0, 0.0, 0.0]), batch_item([3, 3, 1, 2], [1.0, 1.0, 0.0, 0.0])]
    updates = actor.reinforce_update(batch)
    logp = ref.compute_logp(batch)
    seen = {
        "life": life,
        "seconds_to_ready": round(ready, 1),
        "workers": {
            role: [[w.id, w.ip, w.worker_ports] for w in c.workers] for role, c in (("actor", actor), ("ref", ref))
        },
        "world_sizes": sorted({u["world_size"] for u in updates}),
        "logp_items": len(logp),
        "pods": pods(scheduler),
        "revisions": [revision["description"] for revision in scheduler.history()],
    }
    print(json.dumps(seen), flush=True)
    if life == "first":
        os.kill(os.getpid(), signal.SIGKILL)
    ref.destroy()
    actor.destroy()
    scheduler.close()
    print(json.dumps({"destroyed": True}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
