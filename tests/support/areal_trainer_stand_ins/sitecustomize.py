"""Stand-ins for the libraries AReaL's trainer modules import at the top but a CPU test never calls: datasets and
the experiment trackers (swanlab, trackio with gradio, wandb, tensorboardX), hundreds of MB that AReaL's test
environment leaves out (tools/areal-worker-requirements.txt). On PYTHONPATH, this file is Python's sitecustomize:
an import of one of them that nothing installed answers gets an empty module whose attributes are empty classes,
so `import areal.trainer.sft_trainer` works and the code under test (AReaL's config parser, a trainer's
_init_scheduler, the scheduler) runs for real. A test that called into them would fail on the stand-ins."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

STANDING_IN_FOR = {"datasets", "swanlab", "trackio", "wandb", "tensorboardX"}


class StandIn(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda self, *args, **kwargs: None})
        setattr(self, name, value)
        return value


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Asked after every real finder: only what is not installed gets a stand-in."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in STANDING_IN_FOR:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec):
        module = StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(StandInFinder())
