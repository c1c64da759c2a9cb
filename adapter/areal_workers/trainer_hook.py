"""One call that lets AReaL trainers accept `scheduler.type: kubernetes` (or `k8s`).

AReaL picks a scheduler in an if/elif chain inside each trainer's `_init_scheduler` (PPO, SFT, RW, DPO) and
has no registry, so `register_with_areal()` wraps that method on each trainer class: "kubernetes"/"k8s" build a
KubernetesScheduler(exp_config=trainer.config), every other type goes to AReaL's own code unchanged.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

SCHEDULER_TYPES = ("kubernetes", "k8s")
TRAINERS = (
    ("areal.trainer.rl_trainer", "PPOTrainer"),
    ("areal.trainer.sft_trainer", "SFTTrainer"),
    ("areal.trainer.rw_trainer", "RWTrainer"),
    ("areal.trainer.dpo_trainer", "DPOTrainer"),
)
_MARK = "__areal_workers_wrapped__"


def register_with_areal() -> list[str]:
    """Patches every AReaL trainer it can import; returns their names. Calling it twice is harmless."""
    from .scheduler import KubernetesScheduler

    patched = []
    for module_name, class_name in TRAINERS:
        try:
            trainer = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        original = trainer._init_scheduler
        if getattr(original, _MARK, False):
            patched.append(class_name)
            continue

        @functools.wraps(original)
        def _init_scheduler(self: Any, _original: Any = original) -> Any:
            if getattr(self.config.scheduler, "type", None) in SCHEDULER_TYPES:
                return KubernetesScheduler(exp_config=self.config)
            return _original(self)

        setattr(_init_scheduler, _MARK, True)
        trainer._init_scheduler = _init_scheduler
        patched.append(class_name)
    return patched
