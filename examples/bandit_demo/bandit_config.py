"""The experiment config of the bandit demo: what an AReaL trainer hands its scheduler as `exp_config`.

The scheduler reads experiment_name, trial_name and cluster (fileroot, name_resolve) from it, and sends it to every
worker in /configure, where AReaL's worker rebuilds it from its class path and seeds its RNGs with `seed`. So this
module is imported on both sides: by the controller (examples/bandit_demo/demo.py) and by the worker processes,
which have examples/bandit_demo/ on their PYTHONPATH. It must not import areal or numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NameResolveConfig:
    """AReaL's NameResolveConfig, the fields the scheduler passes to the chart."""

    type: str = "nfs"
    nfs_record_root: str = "/tmp/areal/name_resolve"


@dataclass
class ClusterConfig:
    """AReaL's ClusterSpecConfig, the fields the scheduler reads."""

    fileroot: str = "/tmp/areal"
    n_gpus_per_node: int = 8
    name_resolve: NameResolveConfig = field(default_factory=NameResolveConfig)


@dataclass
class BanditExperimentConfig:
    """A multi-armed bandit trained with REINFORCE: the whole experiment in a few numbers."""

    experiment_name: str
    trial_name: str
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    seed: int = 1
    n_arms: int = 8
    iterations: int = 8
    samples_per_rollout_worker: int = 512  # actions sampled by each rollout worker per iteration
    learning_rate: float = 8.0
    kl_coef: float = 0.02  # weight of the KL penalty to the reference policy, in the shaped reward


def cluster_for(fileroot: str) -> ClusterConfig:
    """AReaL's cluster settings with every file of the workers under `fileroot`."""
    return ClusterConfig(fileroot=fileroot, name_resolve=NameResolveConfig(nfs_record_root=f"{fileroot}/name_resolve"))
