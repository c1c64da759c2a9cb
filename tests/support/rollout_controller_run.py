"""AReaL's RolloutController and TrainController over one KubernetesScheduler, as
tests/integration/test_rollout_controller.py runs them in AReaL's environment: the rollout role's engines
(BanditInference) answer the controller's callback server at the scheduler's trainer_address when an episode is
done; the actor (PolicyActor) publishes its weights by AReaL's disk path under the shared fileroot and calls the
same server, which has the rollout engines load them. Prints one JSON line of what it saw.

    python rollout_controller_run.py SETTINGS.json    (KubernetesSchedulerConfig fields, plus "trial", "cpu",
                                                       "fileroot" and optionally "hold_file": after the first
                                                       rollouts, print the callback address and wait for it)

The settings apply over the environment (KubernetesSchedulerConfig.from_env), so as the trainer pod of
`areal-workers submit` it takes the namespace, its pod as owner and the pod IP as trainer_address from the Job.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch
from areal.api.cli_args import InferenceEngineConfig
from areal.api.io_struct import WeightUpdateMeta
from areal.infra.controller.rollout_controller import RolloutController

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig, SchedulingSpec
from bandit_config import BanditExperimentConfig
from bandit_engines import POLICY_FILE, BanditInference, PolicyActor
from bandit_training import PolicyController, train_engine_config

EPISODES = 4
HOLD_SECONDS = 600  # at most, after the first rollouts, until the settings' hold_file exists
ARM_PROBS = [0.1, 0.2, 0.3, 0.9]
WORKFLOW = "bandit_engines.BanditInference"  # a string workflow reaches the engines as it is


def rollout(controller: RolloutController) -> list[dict]:
    return controller.rollout_batch([{"n": 8} for _ in range(EPISODES)], workflow=WORKFLOW)


def main(settings_file: str) -> None:
    # AReaL's Saver creates the weight update's parent directories here, and the actor writes below them: as root
    # on the host while the real node's workers run as uid 1000. On a cluster the trainer and the workers share a
    # user or an fsGroup (the chart README, "Shared storage"); here the directories are made writable for every user.
    os.umask(0)
    settings = json.loads(open(settings_file).read())
    trial, cpu, fileroot = settings.pop("trial"), settings.pop("cpu"), settings.pop("fileroot")
    hold_file = settings.pop("hold_file", None)
    exp = BanditExperimentConfig(experiment_name="rc", trial_name=trial, n_arms=len(ARM_PROBS))
    scheduler = KubernetesScheduler(
        experiment_name="rc", trial_name=trial, config=KubernetesSchedulerConfig.from_env(**settings)
    )
    spec = SchedulingSpec(cpu=cpu, gpu=0, mem=2, port_count=2, cmd="python -m areal.infra.rpc.rpc_server")
    inference = InferenceEngineConfig(
        experiment_name="rc",
        trial_name=trial,
        backend="sglang:d2",  # two rollout workers (the engines are the demo's CPU engines, whatever the name)
        scheduling_spec=(spec,),
        consumer_batch_size=EPISODES,
        max_head_offpolicyness=0,
        request_timeout=120.0,
    )
    rollouts = RolloutController(BanditInference, inference, scheduler)
    rollouts.initialize(role="rollout", server_args={}, n_arms=len(ARM_PROBS), arm_probs=ARM_PROBS, seed=5)
    before = rollout(rollouts)
    if hold_file:  # the test probes the callback server meanwhile (test_trainer_isolation.py)
        print(json.dumps({"callback_ready": rollouts.callback_addr, "release": scheduler.release}), flush=True)
        deadline = time.monotonic() + HOLD_SECONDS
        while not os.path.exists(hold_file) and time.monotonic() < deadline:
            time.sleep(0.5)

    actor = PolicyController(PolicyActor, train_engine_config(exp, spec), scheduler)
    actor.initialize(role="actor", ft_spec=None, n_arms=len(ARM_PROBS), learning_rate=5.0, kl_coef=0.0, seed=7)
    meta = WeightUpdateMeta.from_disk("rc", trial, file_root=fileroot)
    actor.connect_engine(rollouts, meta)
    episodes = [{key: torch.tensor(item[key]) for key in ("actions", "rewards")} for item in before]
    for item in episodes:
        item["ref_logp"] = torch.full(item["actions"].shape, float(np.log(1 / len(ARM_PROBS))), dtype=torch.float64)
        item["attention_mask"] = torch.ones(item["actions"].shape, dtype=torch.int32)
    actor.reinforce_update(episodes)
    weights = scheduler.call_engine(actor.workers[0].id, "get_weights", "actor/0")
    actor.update_weights(meta)  # rank 0 writes, then calls the trainer back; the rollout engines load
    published_removed = not os.path.exists(os.path.join(meta.path, POLICY_FILE))
    rollouts.set_version(1)
    after = rollout(rollouts)

    callback = rollouts.callback_addr
    workers = [[w.id, w.ip] for w in rollouts.workers]
    rollouts.destroy()
    actor.destroy()
    scheduler.delete_workers()
    scheduler.close()
    print(
        json.dumps(
            {
                "callback": callback,
                "trainer_address": scheduler.config.trainer_address,
                "workers": workers,
                "before": before,
                "after": after,
                "actor_weights": np.asarray(weights).tolist(),
                "weight_path": meta.path,
                "published_removed": published_removed,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
