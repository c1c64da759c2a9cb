"""The engines of the bandit demo: small CPU subclasses of AReaL's TrainEngine, run by AReaL's real worker server.

AReaL's POST /create_engine imports an engine by its class path and accepts only subclasses of TrainEngine or
InferenceEngine, so the worker processes import this module (examples/bandit_demo/ is on their PYTHONPATH; on a
real cluster the image must have it). Three engines play the roles of an RL experiment on a multi-armed bandit:

- `PolicyActor` (role actor, driven by AReaL's TrainController): the policy (softmax over per-arm logits). Its
  replicas form a torch.distributed gloo group at the MASTER_ADDR and MASTER_PORT the controller sets (rank 0's pod
  IP and second port); each computes the REINFORCE gradient of its share of the batch, and an all-reduce across the
  pods averages them before every replica applies the same step.
- `ReferencePolicy` (role ref, forked inside the actor's pods, also a TrainController's): the frozen initial
  policy; scores sampled actions for the KL penalty, as AReaL's reference model does. Its log-probabilities stay on
  its worker and reach the actor worker to worker, as AReaL's RTensor references.
- `BanditRollout` (role rollout, called through the scheduler): holds the bandit (arm payout probabilities) and a
  copy of the policy; samples actions and rewards. This is where a real experiment generates with an inference
  server.
- `BanditInference` (an InferenceEngine, driven by AReaL's RolloutController): the same sampling behind AReaL's
  rollout protocol: `submit` answers the controller's callback server when an episode is done, and
  `update_weights_from_disk` loads the policy that `PolicyActor.update_weights` wrote to the shared fileroot, as
  AReaL's disk weight path does.
"""

from __future__ import annotations

import abc
import datetime
import ipaddress
import os
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
import psutil
import torch
import torch.distributed as dist
from areal.api import InferenceEngine, TrainEngine
from areal.api.io_struct import LocalInfServerInfo

RENDEZVOUS_TIMEOUT = datetime.timedelta(minutes=5)
POLICY_FILE = "policy.npy"  # what PolicyActor.update_weights writes under a disk WeightUpdateMeta's path


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def _not_on_cpu(name: str) -> Callable[..., Any]:
    def method(self: object, *args: object, **kwargs: object) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.{name}: the bandit demo's engines have no model")

    method.__name__ = name
    return method


def complete_engine_api(cls: type) -> type:
    """Gives each abstract member of the engine API (TrainEngine or InferenceEngine) that `cls` leaves open a body
    raising NotImplementedError (a property stays a property), so the class can be instantiated whatever AReaL's
    version declares abstract."""
    for name in sorted(getattr(cls, "__abstractmethods__", ())):
        body = _not_on_cpu(name)
        declared = getattr(cls, name, None)
        setattr(cls, name, property(body) if isinstance(declared, property) else body)
    abc.update_abstractmethods(cls)
    return cls


def interface_of(address: str) -> str:
    """The network interface holding `address` (the pod IP): gloo's device must be there. Left to itself gloo binds
    the address the host name resolves to, which for a worker run as a process of this machine (KWOK) is the
    machine's own address, not the pod's."""
    wanted = ipaddress.ip_address(address)
    for name, addresses in psutil.net_if_addrs().items():
        for found in addresses:
            if (
                found.family == socket.AF_INET
                and found.netmask
                and wanted in ipaddress.ip_network(f"{found.address}/{found.netmask}", strict=False)
            ):
                return name
    raise RuntimeError(f"no network interface holds the pod IP {address}")


class BanditEngine(TrainEngine):
    """What the three engines share: a policy version, as AReaL's engines track it."""

    def __init__(self, config: Any = None) -> None:
        self.config = config
        self._version = 0

    @property
    def initialized(self) -> bool:
        return False  # no process group: AReaL's /call neither broadcasts arguments nor asks for data-parallel heads

    def get_version(self) -> int:
        return self._version

    def set_version(self, version: int) -> None:
        self._version = int(version)

    def destroy(self) -> None:
        """Called by the worker server's shutdown hooks and by the scheduler before it deletes workers."""


class DistributedBanditEngine(BanditEngine):
    """A train engine of a TrainController: one rank of a gloo group, data parallel only (every rank its own data
    parallel head, so AReaL's /call broadcasts within a group of one)."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._initialized = False
        self._own_group: Any = None
        self._store_socket: socket.socket | None = None

    def create_process_group(self, parallel_strategy: Any = None) -> None:
        """Joins the group the controller described through set_worker_env (RANK, WORLD_SIZE, MASTER_ADDR,
        MASTER_PORT). Rank 0 serves the rendezvous store on MASTER_ADDR only (torch's own store would listen on
        every address of the host)."""
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        os.environ["GLOO_SOCKET_IFNAME"] = interface_of(os.environ.get("POD_IP", address))
        if rank == 0:
            self._store_socket = socket.create_server((address, port), backlog=64)
            store = dist.TCPStore(
                address,
                port,
                world,
                is_master=True,
                timeout=RENDEZVOUS_TIMEOUT,
                master_listen_fd=self._store_socket.fileno(),
            )
        else:
            store = dist.TCPStore(address, port, world, is_master=False, timeout=RENDEZVOUS_TIMEOUT)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=RENDEZVOUS_TIMEOUT)
        groups = [dist.new_group([member]) for member in range(world)]  # every rank makes every group
        self._own_group = groups[rank]

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def data_parallel_rank(self) -> int:
        return dist.get_rank()

    @property
    def data_parallel_world_size(self) -> int:
        return dist.get_world_size()

    @property
    def data_parallel_group(self) -> Any:
        return dist.group.WORLD

    @property
    def cpu_group(self) -> Any:
        return dist.group.WORLD

    @property
    def context_and_model_parallel_group(self) -> Any:
        return self._own_group

    def is_data_parallel_head(self) -> bool:
        return True

    def current_data_parallel_head(self) -> int:
        return dist.get_rank()

    def export_stats(self) -> dict[str, float]:
        return {}

    def clear_batches(self, shard_ids: list[str]) -> None:
        """Drops the tensors this worker fetched from its peers for the step (TrainController.clear_batches)."""
        from areal.infra.rpc.rtensor import clear_fetch_buffer

        clear_fetch_buffer(shard_ids)

    def fetch_buffer_stats(self) -> dict[str, int]:
        from areal.infra.rpc.rtensor import fetch_buffer_stats

        return fetch_buffer_stats()

    def destroy(self) -> None:
        """TrainController.destroy calls this on every rank before it deletes the workers (rank 0 last)."""
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
        if self._store_socket is not None:
            self._store_socket.close()
            self._store_socket = None
        self._initialized = False


@complete_engine_api
class PolicyActor(DistributedBanditEngine):
    """The trained policy. Every replica starts from the same seed and applies the same all-reduced gradient, so
    the replicas stay identical, as data-parallel replicas do."""

    def initialize(
        self,
        addr: str | None = None,
        ft_spec: Any = None,
        *,
        n_arms: int,
        learning_rate: float,
        kl_coef: float,
        seed: int,
    ) -> None:
        self.logits = np.random.default_rng(seed).normal(0.0, 0.01, size=n_arms)
        self.learning_rate, self.kl_coef = float(learning_rate), float(kl_coef)
        self._initialized = True

    def get_weights(self) -> np.ndarray:
        return self.logits.copy()

    def connect_engine(self, engine: Any, meta: Any) -> None:
        """TrainController.connect_engine hands over AReaL's RolloutCallback: HTTP to the trainer's callback
        server, which forwards to the RolloutController."""
        self.rollout_engine = engine

    def update_weights(self, meta: Any) -> Future | None:
        """AReaL's disk weight path: rank 0 writes the policy under `meta.path` (the shared fileroot) and asks the
        trainer, through the callback, to have the rollout engines load it; the worker server waits on the Future."""
        if dist.get_rank() != 0:
            return None
        os.makedirs(meta.path, exist_ok=True)
        np.save(os.path.join(meta.path, POLICY_FILE), self.logits)
        return self.rollout_engine.update_weights_from_disk(meta)

    def reinforce_update(self, batch: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        """REINFORCE with a mean baseline on a KL-shaped reward r - kl_coef * (log pi(a) - log ref(a)), over this
        rank's share of the batch; the gradient is then averaged over the ranks by an all-reduce."""
        actions = torch.cat([item["actions"] for item in batch]).numpy()
        rewards = torch.cat([item["rewards"] for item in batch]).numpy()
        ref_logp = torch.cat([item["ref_logp"] for item in batch]).numpy()
        probs = softmax(self.logits)
        logp = np.log(probs[actions])
        shaped = rewards - self.kl_coef * (logp - ref_logp)
        advantages = shaped - shaped.mean()
        local = (advantages[:, None] * (np.eye(len(self.logits))[actions] - probs)).mean(axis=0)
        averaged = torch.from_numpy(local.copy())
        dist.all_reduce(averaged, op=dist.ReduceOp.SUM)
        averaged /= dist.get_world_size()
        self.logits = self.logits + self.learning_rate * averaged.numpy()
        self._version += 1
        return {
            "version": self._version,
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "samples": int(len(actions)),
            "kl": float(np.mean(logp - ref_logp)),
            "local_gradient": local.tolist(),
            "applied_gradient": averaged.tolist(),
        }


@complete_engine_api
class ReferencePolicy(DistributedBanditEngine):
    """The frozen initial policy."""

    def initialize(self, addr: str | None = None, ft_spec: Any = None, *, weights: np.ndarray) -> None:
        self.log_probs = np.log(softmax(np.asarray(weights, dtype=float)))
        self._initialized = True

    def compute_logp(self, batch: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        return [torch.from_numpy(self.log_probs[item["actions"].numpy()]) for item in batch]


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


@complete_engine_api
class BanditInference(InferenceEngine):
    """Samples episodes from its copy of the policy, behind AReaL's rollout protocol. AReaL's worker server runs
    every call in one engine thread, so `submit` only queues the episode; a thread of the engine's own samples it
    and posts the controller's callback, and `wait_for_task` hands the result over."""

    def __init__(self, config: Any = None) -> None:
        self.config = config
        self._version = 0
        self._done: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._paused = threading.Event()

    def launch_server(self, server_args: dict[str, Any]) -> LocalInfServerInfo:
        """No generation server to start: the engine samples in-process; the address is the pod's."""
        return LocalInfServerInfo(host=os.environ.get("POD_IP", "127.0.0.1"), port=0, process=None)

    def initialize(self, engine_id: str | None = None, *, n_arms: int, arm_probs: list[float], seed: int) -> None:
        self.engine_id = engine_id
        self.logits = np.zeros(int(n_arms))
        self.arm_probs = np.asarray(arm_probs, dtype=float)
        self.rng = np.random.default_rng(seed + int(engine_id or 0))

    @property
    def initialized(self) -> bool:
        return hasattr(self, "logits")

    def get_version(self) -> int:
        return self._version

    def set_version(self, version: int) -> None:
        self._version = int(version)

    def submit(
        self,
        data: dict[str, Any],
        workflow: Any = None,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: Any = None,
        group_size: int = 1,
        task_id: int | None = None,
        is_eval: bool = False,
        callback_addr: str | None = None,
        proxy_addr: str | None = None,
    ) -> int:
        threading.Thread(
            target=self._episode, args=(task_id, int(data["n"]), workflow, callback_addr), daemon=True
        ).start()
        return task_id

    def _episode(self, task_id: int, n: int, workflow: Any, callback_addr: str | None) -> None:
        import requests

        actions = self.rng.choice(len(self.logits), size=n, p=softmax(self.logits))
        rewards = (self.rng.random(n) < self.arm_probs[actions]).astype(float)
        with self._lock:
            self._done[task_id] = {
                "actions": actions.tolist(),
                "rewards": rewards.tolist(),
                "version": self._version,
                "logits": self.logits.tolist(),
                "workflow": workflow,
                "pod": os.environ.get("POD_NAME", socket.gethostname()),
            }
        if callback_addr:  # what AReaL's WorkflowExecutor posts when an episode is done
            requests.post(callback_addr, json={"task_id": task_id}, timeout=30).raise_for_status()

    def wait_for_task(
        self, task_id: int, timeout: float | None = None, raise_timeout: bool = True
    ) -> dict[str, Any] | None:
        with self._lock:
            return self._done.pop(task_id, None)

    def update_weights_from_disk(self, meta: Any) -> Future:
        self.logits = np.load(os.path.join(meta.path, POLICY_FILE))
        loaded: Future = Future()
        loaded.set_result(None)
        return loaded

    def pause_generation(self) -> None:
        self._paused.set()

    def continue_generation(self) -> None:
        self._paused.clear()

    def destroy(self) -> None:
        """Called by RolloutController.destroy and by the worker server's shutdown hooks."""
