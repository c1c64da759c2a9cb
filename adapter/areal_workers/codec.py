"""Values on the wire to the workers' guard: AReaL's own serialization (tensors, arrays, dataclasses as typed
dicts) when `areal` is importable, plain JSON otherwise."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, default=str))


try:
    from areal.infra.rpc.serialization import deserialize_value, serialize_value  # type: ignore[import-not-found]
except ImportError:
    serialize_value = _plain

    def deserialize_value(value: Any) -> Any:
        return value


__all__ = ["deserialize_value", "serialize_value"]
