"""Dataclasses and enums sent over the wire in codec tests: importable by the test process and by AReaL's worker
environment (no test framework imports)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Phase(enum.Enum):
    WARMUP = "warmup"
    TRAIN = "train"


@dataclass
class Optimizer:
    lr: float = 0.1
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])  # JSON has no tuples


@dataclass
class Config:
    seed: int = 7
    phase: Phase = Phase.TRAIN
    optimizer: Optimizer = field(default_factory=Optimizer)
    tags: dict[str, list[int]] = field(default_factory=lambda: {"a": [1, 2]})


@dataclass
class ClusterSpec:
    fileroot: str = "/tmp/areal"
    n_gpus_per_node: int = 8


@dataclass
class ExperimentConfig:
    """The parts of AReaL's experiment config a scheduler reads, plus the seed AReaL's /configure uses."""

    experiment_name: str
    trial_name: str
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    seed: int = 1
