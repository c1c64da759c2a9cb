"""One call that lets AReaL trainers accept `scheduler.type: kubernetes` (or `k8s`).

AReaL picks a scheduler in an if/elif chain inside each trainer's `_init_scheduler` (PPO, SFT, RW, DPO) and
has no registry, so `register_with_areal()` wraps that method on each trainer class: "kubernetes"/"k8s" build a
KubernetesScheduler(exp_config=trainer.config), every other type goes to AReaL's own code unchanged. A trainer
module not imported yet is patched when it is (an import hook), so registering costs nothing.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
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
    """Makes AReaL's trainers accept the Kubernetes scheduler; returns the names of those it applies to. A trainer
    module already imported is patched at once, the others as they are imported: importing them here would pull
    in all their dependencies (datasets, experiment trackers, ...) for trainers the program may never use. Calling
    it twice is harmless."""
    registered = []
    for module_name, class_name in TRAINERS:
        module = sys.modules.get(module_name)
        if module is not None:
            if _patch(getattr(module, class_name, None)):
                registered.append(class_name)
        elif _module_file_exists(module_name):
            _PatchOnImport.installed().pending[module_name] = class_name
            registered.append(class_name)
    return registered


def _module_file_exists(module_name: str) -> bool:
    """Whether AReaL ships `module_name`, found without importing AReaL (whose packages import every trainer)."""
    top, *rest = module_name.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    relative = Path(*rest)
    return any(
        (Path(location) / relative.with_suffix(".py")).is_file() or (Path(location) / relative).is_dir()
        for location in spec.submodule_search_locations
    )


def _patch(trainer: Any) -> bool:
    """Wraps `trainer._init_scheduler`: "kubernetes"/"k8s" build a KubernetesScheduler, the rest is AReaL's."""
    original = getattr(trainer, "_init_scheduler", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True

    @functools.wraps(original)
    def _init_scheduler(self: Any, _original: Any = original) -> Any:
        if getattr(self.config.scheduler, "type", None) in SCHEDULER_TYPES:
            from .scheduler import KubernetesScheduler

            return KubernetesScheduler(exp_config=self.config)
        return _original(self)

    setattr(_init_scheduler, _MARK, True)
    trainer._init_scheduler = _init_scheduler
    return True


class _PatchingLoader(importlib.abc.Loader):
    """Runs a trainer module as its own loader would, then patches its trainer class."""

    def __init__(self, loader: importlib.abc.Loader, class_name: str) -> None:
        self.loader, self.class_name = loader, class_name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        _patch(getattr(module, self.class_name, None))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds AReaL's trainer modules with the other finders and hands them to a _PatchingLoader."""

    def __init__(self) -> None:
        self.pending: dict[str, str] = {}

    @classmethod
    def installed(cls) -> _PatchOnImport:
        for finder in sys.meta_path:
            if isinstance(finder, cls):
                return finder
        finder = cls()
        sys.meta_path.insert(0, finder)
        return finder

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        class_name = self.pending.get(fullname)
        if class_name is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, class_name)
                return spec
        return None
