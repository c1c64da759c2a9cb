"""The controller's values on the wire are AReaL's: what our codec writes, AReaL's worker rebuilds, and back."""

from __future__ import annotations

import json
import os
import subprocess

import numpy
import pytest

from areal_workers.guard.wire_format import plain_deserialize_value, plain_serialize_value
from repo_paths import AREAL_WORKER_PYTHON, REPO
from wire_types import Config, Optimizer, Phase

SUPPORT = REPO / "tests" / "support"


def test_dataclasses_enums_and_arrays_round_trip():
    value = {"config": Config(), "weights": numpy.arange(6, dtype=numpy.float32).reshape(2, 3), "n": [1, None, "x"]}
    wire = json.loads(json.dumps(plain_serialize_value(value)))
    back = plain_deserialize_value(wire)
    assert back["config"].seed == 7 and back["config"].phase is Phase.TRAIN
    assert back["config"].optimizer.lr == 0.1 and back["config"].tags == {"a": [1, 2]}
    assert back["weights"].dtype == numpy.float32 and back["weights"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert back["n"] == [1, None, "x"]


def test_the_wire_format_is_areals_typed_dicts():
    wire = plain_serialize_value({"c": Optimizer(), "p": Phase.WARMUP, "a": numpy.zeros(2, dtype=numpy.int64)})
    assert wire["c"] == {
        "type": "dataclass",
        "class_path": "wire_types.Optimizer",
        "data": {"lr": 0.1, "betas": [0.9, 0.99]},
    }
    assert wire["p"] == {"type": "enum", "class_path": "wire_types.Phase", "value": "warmup"}
    assert wire["a"]["type"] == "ndarray" and wire["a"]["shape"] == [2] and wire["a"]["dtype"] == "<i8"


def test_a_class_the_controller_cannot_import_stays_a_dict():
    wire = {"type": "dataclass", "class_path": "no_such_module.Config", "data": {"seed": 1}}
    assert plain_deserialize_value(wire) == wire


def test_object_arrays_are_refused():
    with pytest.raises(ValueError, match="object or void dtype"):
        plain_serialize_value(numpy.array([object()]))


AREAL_SIDE = """
import json, sys
from areal.infra.rpc.serialization import deserialize_value, serialize_value
import wire_types
ours = json.loads(sys.stdin.read())
rebuilt = deserialize_value(ours)
assert rebuilt["config"] == wire_types.Config(), rebuilt["config"]
assert rebuilt["weights"].tolist() == [[0.0, 1.0], [2.0, 3.0]] and str(rebuilt["weights"].dtype) == "float64"
print(json.dumps(serialize_value({"config": wire_types.Config(), "weights": rebuilt["weights"]})))
"""


@pytest.mark.areal_worker
def test_areals_own_serialization_agrees_with_ours():
    """AReaL's deserialize_value rebuilds what we send, and what AReaL sends we rebuild (needs `make areal-worker`)."""
    assert AREAL_WORKER_PYTHON.exists(), "AReaL's worker environment is missing: run `make areal-worker`"
    ours = plain_serialize_value({"config": Config(), "weights": numpy.arange(4, dtype=numpy.float64).reshape(2, 2)})
    pythonpath = os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")]))
    answered = subprocess.run(
        [str(AREAL_WORKER_PYTHON), "-c", AREAL_SIDE],
        input=json.dumps(ours),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": pythonpath},
    )
    assert answered.returncode == 0, answered.stderr[-3000:]
    theirs = json.loads(answered.stdout.splitlines()[-1])
    assert theirs["config"] == ours["config"]
    back = plain_deserialize_value(theirs)
    assert back["config"] == Config() and back["weights"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
