"""The engines of the bandit demo: small CPU subclasses of AReaL's TrainEngine, run by AReaL's real worker server.

AReaL's POST /create_engine imports an engine by its class path and accepts only subclasses of TrainEngine or
InferenceEngine, so the worker processes import this module (examples/ is on their PYTHONPATH; on a real cluster
the image must have it). Three engines play the roles of an RL experiment on a multi-armed bandit:

- `BanditRollout` (role rollout): holds the bandit (arm payout probabilities) and a copy of the policy; samples
  actions and rewards. This is where a real experiment generates with an inference server.
- `ReferencePolicy` (role ref, forked inside the actor's pods): the frozen initial policy; scores sampled actions
  for the KL penalty, as AReaL's reference model does.
- `PolicyActor` (role actor): the policy (softmax over per-arm logits); computes the REINFORCE gradient of its
  share of the batch and applies the averaged gradient.

Arrays cross the wire as numpy arrays in AReaL's serialized form. Nothing here touches torch or a process group:
`initialized` stays False, so AReaL's /call neither broadcasts arguments nor asks for data-parallel heads.
"""

from __future__ import annotations

import abc
from typing import Any, Callable

import numpy as np
from areal.api import TrainEngine


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def _not_on_cpu(name: str) -> Callable[..., Any]:
    def method(self: object, *args: object, **kwargs: object) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.{name}: the bandit demo's engines have no model")

    method.__name__ = name
    return method


def complete_engine_api(cls: type) -> type:
    """Gives each abstract member of TrainEngine that `cls` leaves open a body raising NotImplementedError (a
    property stays a property), so the class can be instantiated whatever AReaL's version declares abstract."""
    for name in sorted(getattr(cls, "__abstractmethods__", ())):
        body = _not_on_cpu(name)
        declared = getattr(TrainEngine, name, None)
        setattr(cls, name, property(body) if isinstance(declared, property) else body)
    abc.update_abstractmethods(cls)
    return cls


class BanditEngine(TrainEngine):
    """What the three engines share: a policy version, as AReaL's engines track it."""

    def __init__(self) -> None:
        self._version = 0

    @property
    def initialized(self) -> bool:
        return False  # no process group: see the module docstring

    def get_version(self) -> int:
        return self._version

    def set_version(self, version: int) -> None:
        self._version = int(version)

    def destroy(self) -> None:
        """Called by the worker server's shutdown hooks and by the scheduler before it deletes workers."""


@complete_engine_api
class PolicyActor(BanditEngine):
    """The trained policy. Every actor replica starts from the same seed and applies the same averaged gradient,
    so the replicas stay identical, as data-parallel replicas do."""

    def __init__(self, n_arms: int, learning_rate: float, kl_coef: float, seed: int) -> None:
        super().__init__()
        self.logits = np.random.default_rng(seed).normal(0.0, 0.01, size=n_arms)
        self.learning_rate = float(learning_rate)
        self.kl_coef = float(kl_coef)

    def get_weights(self) -> np.ndarray:
        return self.logits.copy()

    def compute_gradient(self, actions: np.ndarray, rewards: np.ndarray, ref_logp: np.ndarray) -> dict[str, Any]:
        """REINFORCE with a mean baseline on a KL-shaped reward r - kl_coef * (log pi(a) - log ref(a))."""
        probs = softmax(self.logits)
        logp = np.log(probs[actions])
        shaped = rewards - self.kl_coef * (logp - ref_logp)
        advantages = shaped - shaped.mean()
        one_hot = np.eye(len(self.logits))[actions]
        gradient = (advantages[:, None] * (one_hot - probs)).mean(axis=0)
        return {"gradient": gradient, "kl": float(np.mean(logp - ref_logp)), "samples": int(len(actions))}

    def apply_gradient(self, gradient: np.ndarray) -> int:
        """One ascent step; returns the new policy version."""
        self.logits = self.logits + self.learning_rate * np.asarray(gradient, dtype=float)
        self._version += 1
        return self._version


@complete_engine_api
class ReferencePolicy(BanditEngine):
    """The frozen initial policy."""

    def __init__(self, weights: np.ndarray) -> None:
        super().__init__()
        self.log_probs = np.log(softmax(np.asarray(weights, dtype=float)))

    def logp(self, actions: np.ndarray) -> np.ndarray:
        return self.log_probs[np.asarray(actions, dtype=int)]


@complete_engine_api
class BanditRollout(BanditEngine):
    """Samples actions from its copy of the policy and rewards from the bandit (Bernoulli arms)."""

    def __init__(self, arm_probs: np.ndarray, seed: int) -> None:
        super().__init__()
        self.arm_probs = np.asarray(arm_probs, dtype=float)
        self.logits = np.zeros(len(self.arm_probs))
        self.rng = np.random.default_rng(seed)

    def set_weights(self, weights: np.ndarray, version: int) -> int:
        """The weight update of an RL loop: the trainer pushes the actor's new policy here."""
        self.logits = np.asarray(weights, dtype=float)
        self.set_version(version)
        return self._version

    def generate(self, n: int) -> dict[str, Any]:
        actions = self.rng.choice(len(self.logits), size=int(n), p=softmax(self.logits))
        rewards = (self.rng.random(int(n)) < self.arm_probs[actions]).astype(float)
        return {"actions": actions, "rewards": rewards, "version": self._version}
