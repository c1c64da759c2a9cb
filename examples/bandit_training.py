"""The bandit demo's RL loop as an AReaL trainer drives it through its scheduler: engines created on every worker,
then REINFORCE iterations across the rollout, ref and actor roles.

This is the controller's side; the engines themselves (bandit_engines.py) run in the worker processes, which import
them by the class paths below.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from areal_workers import KubernetesScheduler, Worker

from bandit_config import BanditExperimentConfig
from demo_checks import expect
from demo_setup import REPLICAS
from demo_terminal import Terminal

ACTOR_ENGINE = "bandit_engines.PolicyActor"
REFERENCE_ENGINE = "bandit_engines.ReferencePolicy"
ROLLOUT_ENGINE = "bandit_engines.BanditRollout"
MIN_REWARD_GAIN = 0.1


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

    def call(self, worker: Worker, method: str, *args: Any, **kwargs: Any) -> Any:
        """An engine call as AReaL's controllers make it: the engine named after the worker."""
        return self.scheduler.async_call_engine(worker.id, method, None, *args, **kwargs)

    async def gather(self, workers: list[Worker], method: str, *args: Any) -> list[Any]:
        return await asyncio.gather(*(self.call(w, method, *args) for w in workers))

    # --- engines -----------------------------------------------------------------------------------------

    def create_engines(self) -> None:
        self.out.step("Create engines", "create_engine on every worker: CPU subclasses of AReaL's TrainEngine "
                                        "(examples/bandit_engines.py)")
        started = time.monotonic()
        asyncio.run(self._create_engines())
        self.out.table(("ROLE", "ENGINE", "HOLDS"), [
            ("actor", ACTOR_ENGINE, "the policy: softmax over per-arm logits"),
            ("ref", REFERENCE_ENGINE, "a frozen copy of the initial policy, for a KL penalty"),
            ("rollout", ROLLOUT_ENGINE, "the bandit, and a copy of the policy (weights v0)")])
        self.out.ok(f"{sum(map(len, self.workers.values()))} engines created; set_worker_env(RANK, WORLD_SIZE) on "
                    f"actor and ref first, as AReaL's TrainController does", time.monotonic() - started)

    async def _create_engines(self) -> None:
        scheduler, exp = self.scheduler, self.exp
        for role in ("actor", "ref"):  # what AReaL's TrainController sets before it creates train engines
            await asyncio.gather(*(scheduler.set_worker_env(w.id, {"RANK": str(rank), "WORLD_SIZE": str(REPLICAS)})
                                   for rank, w in enumerate(self.workers[role])))
        await asyncio.gather(*(scheduler.create_engine(
            w.id, ACTOR_ENGINE, None, n_arms=exp.n_arms, learning_rate=exp.learning_rate,
            kl_coef=exp.kl_coef, seed=exp.seed) for w in self.workers["actor"]))
        initial = await self.call(self.workers["actor"][0], "get_weights")
        expect(isinstance(initial, np.ndarray) and initial.shape == (exp.n_arms,),
               f"get_weights returned {type(initial).__name__}, not an array of {exp.n_arms} logits")
        await asyncio.gather(*(scheduler.create_engine(w.id, REFERENCE_ENGINE, None, weights=initial)
                               for w in self.workers["ref"]))
        await asyncio.gather(*(self._create_rollout_engine(rank, initial, 0)
                               for rank in range(len(self.workers["rollout"]))))

    async def _create_rollout_engine(self, rank: int, weights: np.ndarray, version: int) -> None:
        worker = self.workers["rollout"][rank]
        await self.scheduler.create_engine(worker.id, ROLLOUT_ENGINE, None, arm_probs=self.arm_probs,
                                           seed=self.exp.seed * 1000 + rank)
        await self.call(worker, "set_weights", weights, version)

    # --- training ----------------------------------------------------------------------------------------

    def train(self) -> None:
        n = self.exp.samples_per_rollout_worker
        self.out.step("Train", f"rollout engines sample {n} actions each → ref engines score them → actor engines "
                               f"compute gradients, average, step → new weights to the rollout engines")
        started = time.monotonic()
        self.out.table(("ITER", "MEAN REWARD", "BEST ARM", "KL(pi||ref)", "POLICY"), [])
        history = [self.iterate(i + 1) for i in range(self.exp.iterations)]
        first, last = history[0].mean_reward, history[-1].mean_reward
        expect(last > first + MIN_REWARD_GAIN,
               f"the mean reward rose by less than {MIN_REWARD_GAIN}: {first:.3f} -> {last:.3f}")
        weights = asyncio.run(self.gather(self.workers["actor"], "get_weights"))
        expect(all(np.allclose(weights[0], w) for w in weights[1:]), "the actor replicas' weights differ")
        self.out.ok(f"mean reward {first:.3f} → {last:.3f} (the best arm pays {self.arm_probs.max():.2f}); the "
                    f"{REPLICAS} actor replicas hold identical weights", time.monotonic() - started)

    def iterate(self, number: int) -> Stats:
        stats = asyncio.run(self._iteration(number))
        self.out.say(f"   {stats.iteration:<4}  {stats.mean_reward:<11.3f}  {stats.best_arm_share:<8.1%}  "
                     f"{stats.kl:<11.3f}  v{stats.version}")
        return stats

    async def _iteration(self, number: int) -> Stats:
        rollout, ref, actor = self.workers["rollout"], self.workers["ref"], self.workers["actor"]
        batches = await self.gather(rollout, "generate", self.exp.samples_per_rollout_worker)
        expect({b["version"] for b in batches} == {self.version},
               f"rollout engines generated with policy versions {[b['version'] for b in batches]}, not v{self.version}")
        actions = [b["actions"] for b in batches]
        rewards = [b["rewards"] for b in batches]
        # Data parallel: shard k of the batch goes to ref k and actor k.
        ref_logp = await asyncio.gather(*(self.call(w, "logp", a) for w, a in zip(ref, actions)))
        grads = await asyncio.gather(*(self.call(w, "compute_gradient", a, r, lp)
                                       for w, a, r, lp in zip(actor, actions, rewards, ref_logp)))
        # The all-reduce a GPU engine does with NCCL: the mean of the replicas' gradients.
        gradient = np.mean([g["gradient"] for g in grads], axis=0)
        versions = await self.gather(actor, "apply_gradient", gradient)
        expect(len(set(versions)) == 1, f"actor replicas disagree on the policy version: {versions}")
        self.version = versions[0]
        weights = await self.call(actor[0], "get_weights")
        await self.gather(rollout, "set_weights", weights, self.version)
        all_actions, all_rewards = np.concatenate(actions), np.concatenate(rewards)
        return Stats(iteration=number, mean_reward=float(all_rewards.mean()),
                     best_arm_share=float(np.mean(all_actions == int(np.argmax(self.arm_probs)))),
                     kl=float(np.mean([g["kl"] for g in grads])), version=self.version)

    # --- after a failure ---------------------------------------------------------------------------------

    def resume(self, replaced: list[str]) -> None:
        """The actor and ref engines kept their state; an engine on a replaced pod (`replaced`: pod names) is gone
        and is created anew, as a trainer that recovers a worker does."""
        versions = asyncio.run(self.gather(self.workers["actor"] + self.workers["ref"], "get_version"))
        expect(versions[:REPLICAS] == [self.version] * REPLICAS, f"actor engines lost their state: {versions}")
        lost = [rank for rank, w in enumerate(self.workers["rollout"])
                if any(name.endswith(f"-rollout-{rank}") for name in replaced)]
        weights = asyncio.run(self.call(self.workers["actor"][0], "get_weights"))
        asyncio.run(self._recreate(lost, weights))
        recreated = f"; engine re-created on {', '.join(f'rollout/{r}' for r in lost)}" if lost else ""
        self.out.ok(f"actor engines still at policy v{versions[0]}, ref forks answer{recreated}; training goes on:")
        self.iterate(self.exp.iterations + 1)

    async def _recreate(self, ranks: list[int], weights: np.ndarray) -> None:
        await asyncio.gather(*(self._create_rollout_engine(rank, weights, self.version) for rank in ranks))
