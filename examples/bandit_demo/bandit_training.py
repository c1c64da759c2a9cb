"""The bandit demo's RL loop as an AReaL trainer drives it. The train roles are AReaL's own TrainController's: its
`initialize` creates their workers through the scheduler, sets RANK, WORLD_SIZE, MASTER_ADDR (rank 0's pod IP) and
MASTER_PORT (rank 0's second port), creates the engines and has them form a gloo group; its dispatch splits a batch
over the data-parallel ranks; its `destroy` removes the workers, rank 0 last. The rollout role is called through the
scheduler, as a rollout controller does.

This is the controller's side; the engines themselves (bandit_engines.py) run in the worker processes, which import
them by the class paths TrainController sends (`bandit_engines.PolicyActor`, ...).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from areal.api import FinetuneSpec
from areal.api.cli_args import SchedulingSpec, SchedulingStrategy, TrainEngineConfig
from areal.infra.controller import TrainController

from areal_workers import KubernetesScheduler, Worker
from bandit_config import BanditExperimentConfig
from bandit_engines import BanditRollout, PolicyActor, ReferencePolicy
from demo_checks import expect
from demo_setup import REPLICAS
from demo_terminal import Terminal

ROLLOUT_ENGINE = f"{BanditRollout.__module__}.{BanditRollout.__name__}"
MIN_REWARD_GAIN = 0.1


class PolicyController(TrainController):
    """The actor's controller: AReaL's TrainController with the bandit's update, as AReaL's PPOActorController
    adds `ppo_update` to it."""

    def get_weights(self) -> np.ndarray:
        return self._custom_function_call("get_weights")

    def reinforce_update(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._custom_function_call("reinforce_update", batch)


class ReferenceController(TrainController):
    """The reference model's controller (AReaL's actor controller serves `compute_logp` the same way)."""

    def compute_logp(self, batch: list[dict[str, Any]]) -> list[Any]:
        return self._custom_function_call("compute_logp", batch)


def train_engine_config(
    exp: BanditExperimentConfig, spec: SchedulingSpec, strategy: SchedulingStrategy | None = None
) -> TrainEngineConfig:
    """A train role's config as AReaL's experiment configs hold it; `backend` gives TrainController the data
    parallel degree (the engines are the demo's CPU engines, whatever backend name the string carries)."""
    return TrainEngineConfig(
        experiment_name=exp.experiment_name,
        trial_name=exp.trial_name,
        backend=f"fsdp:d{REPLICAS}",
        scheduling_spec=(spec,),
        scheduling_strategy=strategy or SchedulingStrategy(),
    )


@dataclass
class Stats:
    iteration: int
    mean_reward: float
    best_arm_share: float
    kl: float
    version: int


@dataclass
class BanditTraining:
    scheduler: KubernetesScheduler
    out: Terminal
    exp: BanditExperimentConfig
    arm_probs: np.ndarray
    workers: dict[str, list[Worker]]  # by role; the demo's worker steps fill it in
    version: int = 0
    actor: PolicyController | None = None
    ref: ReferenceController | None = None
    ft_spec: FinetuneSpec = field(
        default_factory=lambda: FinetuneSpec(total_train_epochs=1, dataset_size=1, train_batch_size=1)
    )

    def call(self, worker: Worker, method: str, *args: Any, **kwargs: Any) -> Any:
        """An engine call as AReaL's controllers make it: the engine named after the worker."""
        return self.scheduler.async_call_engine(worker.id, method, None, *args, **kwargs)

    async def gather(self, workers: list[Worker], method: str, *args: Any) -> list[Any]:
        return await asyncio.gather(*(self.call(w, method, *args) for w in workers))

    # --- the train roles, by AReaL's TrainController -----------------------------------------------------

    def create_actor(self, spec: SchedulingSpec) -> list[Worker]:
        """TrainController.initialize: workers, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, engines, gloo group."""
        exp = self.exp
        self.actor = PolicyController(PolicyActor, train_engine_config(exp, spec), self.scheduler)
        self.actor.initialize(
            role="actor",
            ft_spec=self.ft_spec,
            n_arms=exp.n_arms,
            learning_rate=exp.learning_rate,
            kl_coef=exp.kl_coef,
            seed=exp.seed,
        )
        self.workers["actor"] = list(self.actor.workers)
        return self.workers["actor"]

    def create_reference(self, spec: SchedulingSpec) -> list[Worker]:
        """The same, for a role forked into the actor's pods (colocation, fork=True): its ranks form their own
        group at ref/0's ports."""
        initial = self.actor.get_weights()
        expect(
            isinstance(initial, np.ndarray) and initial.shape == (self.exp.n_arms,),
            f"get_weights returned {type(initial).__name__}, not an array of {self.exp.n_arms} logits",
        )
        strategy = SchedulingStrategy(type="colocation", target="actor", fork=True)
        self.ref = ReferenceController(ReferencePolicy, train_engine_config(self.exp, spec, strategy), self.scheduler)
        self.ref.initialize(role="ref", ft_spec=self.ft_spec, weights=initial)
        self.workers["ref"] = list(self.ref.workers)
        return self.workers["ref"]

    def master(self, controller: TrainController) -> str:
        return f"{controller._master_addr}:{controller._master_port}"

    # --- the rollout role, through the scheduler ---------------------------------------------------------

    def create_rollout_engines(self) -> None:
        self.out.step(
            "Engines",
            "the train roles' engines came with TrainController.initialize; the rollout "
            "role's are create_engine calls through the scheduler",
        )
        started = time.monotonic()
        weights = self.actor.get_weights()
        asyncio.run(self._create_rollout_engines(range(len(self.workers["rollout"])), weights, 0))
        self.out.table(
            ("ROLE", "ENGINE", "CREATED BY", "HOLDS"),
            [
                (
                    "actor",
                    "bandit_engines.PolicyActor",
                    "TrainController",
                    f"the policy; gloo group of {REPLICAS} at {self.master(self.actor)}",
                ),
                (
                    "ref",
                    "bandit_engines.ReferencePolicy",
                    "TrainController",
                    f"the initial policy, frozen; gloo group at {self.master(self.ref)}",
                ),
                ("rollout", ROLLOUT_ENGINE, "create_engine", "the bandit, and a copy of the policy (weights v0)"),
            ],
        )
        self.out.ok(f"{sum(map(len, self.workers.values()))} engines", time.monotonic() - started)

    async def _create_rollout_engines(self, ranks: Any, weights: np.ndarray, version: int) -> None:
        async def create(rank: int) -> None:
            worker = self.workers["rollout"][rank]
            await self.scheduler.create_engine(
                worker.id, ROLLOUT_ENGINE, None, arm_probs=self.arm_probs, seed=self.exp.seed * 1000 + rank
            )
            await self.call(worker, "set_weights", weights, version)

        await asyncio.gather(*(create(rank) for rank in ranks))

    # --- training ----------------------------------------------------------------------------------------

    def train(self) -> None:
        n = self.exp.samples_per_rollout_worker
        self.out.step(
            "Train",
            f"rollout engines sample {n} actions each → the ref controller scores them on its "
            f"ranks → the actor controller splits the batch over its {REPLICAS} ranks, which "
            f"all-reduce their gradients over gloo and step → new weights to the rollout engines",
        )
        started = time.monotonic()
        self.out.table(("ITER", "MEAN REWARD", "BEST ARM", "KL(pi||ref)", "POLICY"), [])
        history = [self.iterate(i + 1) for i in range(self.exp.iterations)]
        first, last = history[0].mean_reward, history[-1].mean_reward
        expect(
            last > first + MIN_REWARD_GAIN,
            f"the mean reward rose by less than {MIN_REWARD_GAIN}: {first:.3f} -> {last:.3f}",
        )
        weights = asyncio.run(self.gather(self.workers["actor"], "get_weights"))
        expect(all(np.allclose(weights[0], w) for w in weights[1:]), "the actor replicas' weights differ")
        self.out.ok(
            f"mean reward {first:.3f} → {last:.3f} (the best arm pays {self.arm_probs.max():.2f}); the "
            f"{REPLICAS} actor replicas saw different samples and hold identical weights: the gradients "
            f"were all-reduced between their pods",
            time.monotonic() - started,
        )

    def iterate(self, number: int) -> Stats:
        stats = self._iteration(number)
        self.out.say(
            f"   {stats.iteration:<4}  {stats.mean_reward:<11.3f}  {stats.best_arm_share:<8.1%}  "
            f"{stats.kl:<11.3f}  v{stats.version}"
        )
        return stats

    def _iteration(self, number: int) -> Stats:
        batches = asyncio.run(self.gather(self.workers["rollout"], "generate", self.exp.samples_per_rollout_worker))
        expect(
            {b["version"] for b in batches} == {self.version},
            f"rollout engines generated with policy versions {[b['version'] for b in batches]}, not v{self.version}",
        )
        # One trajectory group per rollout worker, as tensors: TrainController splits them over the ranks.
        batch = [
            {
                "actions": torch.from_numpy(b["actions"]),
                "rewards": torch.from_numpy(b["rewards"]),
                "attention_mask": torch.ones(len(b["actions"]), dtype=torch.int32),
            }
            for b in batches
        ]
        for item, logp in zip(batch, self.ref.compute_logp(batch)):
            item["ref_logp"] = logp  # a reference to the tensor on its ref worker: the actor worker fetches it
        updates = self.actor.reinforce_update(batch)
        self.check_all_reduce(updates)
        self.version = updates[0]["version"]
        self.actor.clear_batches(*batch)
        weights = self.actor.get_weights()
        asyncio.run(self.gather(self.workers["rollout"], "set_weights", weights, self.version))
        actions = np.concatenate([b["actions"] for b in batches])
        rewards = np.concatenate([b["rewards"] for b in batches])
        return Stats(
            iteration=number,
            mean_reward=float(rewards.mean()),
            best_arm_share=float(np.mean(actions == int(np.argmax(self.arm_probs)))),
            kl=float(np.mean([u["kl"] for u in updates])),
            version=self.version,
        )

    def check_all_reduce(self, updates: list[dict[str, Any]]) -> None:
        """Each rank reports its own gradient and the one it applied: every rank applied the mean of all."""
        by_rank = {u["rank"]: u for u in updates}
        expect(
            sorted(by_rank) == list(range(REPLICAS)) and {u["world_size"] for u in updates} == {REPLICAS},
            f"the update ran on ranks {sorted(by_rank)} of groups of {[u['world_size'] for u in updates]}",
        )
        mean = np.mean([u["local_gradient"] for u in by_rank.values()], axis=0)
        expect(
            all(np.allclose(u["applied_gradient"], mean) for u in by_rank.values()),
            "a rank applied a gradient other than the mean of the ranks' gradients",
        )
        expect(len({u["version"] for u in updates}) == 1, f"ranks disagree on the version: {updates}")

    # --- after a failure, and at the end -----------------------------------------------------------------

    def resume(self, replaced: list[str]) -> None:
        """The actor and ref engines kept their state; an engine on a replaced pod (`replaced`: pod names) is gone
        and is created anew, as a trainer that recovers a worker does."""
        versions = asyncio.run(self.gather(self.workers["actor"] + self.workers["ref"], "get_version"))
        expect(
            versions == [self.version] * REPLICAS + [0] * REPLICAS, f"actor or ref engines lost their state: {versions}"
        )
        lost = [
            rank
            for rank, w in enumerate(self.workers["rollout"])
            if any(name.endswith(f"-rollout-{rank}") for name in replaced)
        ]
        asyncio.run(self._create_rollout_engines(lost, self.actor.get_weights(), self.version))
        recreated = f"; engine re-created on {', '.join(f'rollout/{r}' for r in lost)}" if lost else ""
        self.out.ok(f"actor engines still at policy v{versions[0]}, ref forks answer{recreated}; training goes on:")
        self.iterate(self.exp.iterations + 1)

    def destroy(self) -> None:
        """TrainController.destroy for ref then actor: engines destroyed (each rank leaves its group), then
        delete_workers(role, reverse_order=True)."""
        for controller in (self.ref, self.actor):
            if controller is not None and controller.workers:
                controller.destroy()
