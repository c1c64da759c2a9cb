"""AReaL's TrainController over a KubernetesScheduler, as tests/integration/test_train_controller.py runs it in
AReaL's environment: initialize() (workers, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, engines, a gloo group across
the pods), one data-parallel update whose gradients the ranks all-reduce, then destroy(). Prints one JSON line of
what it saw. The engines and the controller are the demo's (examples/bandit_demo/bandit_engines.py, bandit_training.py).

    python train_controller_run.py SETTINGS.json    (KubernetesSchedulerConfig fields, plus "trial")
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig, SchedulingSpec
from bandit_config import BanditExperimentConfig
from bandit_engines import PolicyActor
from bandit_training import PolicyController, train_engine_config


def batch_item(actions: list[int], rewards: list[float]) -> dict[str, torch.Tensor]:
    return {
        "actions": torch.tensor(actions),
        "rewards": torch.tensor(rewards, dtype=torch.float64),
        "ref_logp": torch.full((len(actions),), float(np.log(0.25)), dtype=torch.float64),
        "attention_mask": torch.ones(len(actions), dtype=torch.int32),
    }


def main(settings_file: str) -> None:
    settings = json.loads(open(settings_file).read())
    trial, cpu = settings.pop("trial"), settings.pop("cpu")
    exp = BanditExperimentConfig(experiment_name="tc", trial_name=trial, n_arms=4)
    scheduler = KubernetesScheduler(
        experiment_name="tc", trial_name=trial, config=KubernetesSchedulerConfig(**settings)
    )
    spec = SchedulingSpec(cpu=cpu, gpu=0, mem=2, port_count=2, cmd="python -m areal.infra.rpc.rpc_server")
    actor = PolicyController(PolicyActor, train_engine_config(exp, spec), scheduler)
    actor.initialize(role="actor", ft_spec=None, n_arms=4, learning_rate=1.0, kl_coef=0.0, seed=7)
    workers = list(actor.workers)
    # Two different shards: arm 0 pays on one rank, arm 3 on the other; only an all-reduce makes them agree.
    updates = actor.reinforce_update(
        [batch_item([0, 0, 1, 2], [1.0, 1.0, 0.0, 0.0]), batch_item([3, 3, 1, 2], [1.0, 1.0, 0.0, 0.0])]
    )
    weights = [scheduler.call_engine(w.id, "get_weights", f"actor/{rank}") for rank, w in enumerate(workers)]
    master = f"{actor._master_addr}:{actor._master_port}"
    actor.destroy()
    left = [revision["description"] for revision in scheduler.history()]  # the release went with its last role
    scheduler.close()
    print(
        json.dumps(
            {
                "workers": [[w.id, w.ip, w.worker_ports] for w in workers],
                "master": master,
                "updates": updates,
                "weights": [w.tolist() for w in weights],
                "revisions_left": left,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
