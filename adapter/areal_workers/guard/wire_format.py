"""Values on the wire to the workers' guard, in AReaL's format (areal/infra/rpc/serialization.py).

With `areal` importable, AReaL's own serialize_value/deserialize_value are used (tensors, tokenizers, ...). Without
it, the same wire format for what a controller without torch can hold: dataclasses and enums as typed dicts that
AReaL's worker rebuilds (`{"type": "dataclass", "class_path", "data"}`, `{"type": "enum", "class_path", "value"}`),
numpy arrays as `{"type": "ndarray", "data": base64, "shape", "dtype"}`, containers recursively.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import importlib
import logging
import sys
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)


def _import_numpy() -> ModuleType | None:
    """numpy, which is optional on the controller and costs a fifth of a second to import: only an array on the wire
    imports it (a value to serialize can only be an array once something imported numpy: sys.modules has it)."""
    try:
        return importlib.import_module("numpy")
    except ImportError:
        return None


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _import(class_path: str) -> Any:
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def plain_serialize_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: plain_serialize_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"type": "dataclass", "class_path": _class_path(type(value)), "data": data}
    if isinstance(value, enum.Enum):
        return {"type": "enum", "class_path": _class_path(type(value)), "value": value.value}
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        if value.dtype.kind in "OV":
            raise ValueError("object or void dtype arrays cannot be sent to a worker")
        encoded = base64.b64encode(numpy.ascontiguousarray(value).tobytes()).decode()
        return {"type": "ndarray", "data": encoded, "shape": list(value.shape), "dtype": value.dtype.str}
    if isinstance(value, dict):
        return {key: plain_serialize_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_serialize_value(item) for item in value]
    return value


def plain_deserialize_value(value: Any) -> Any:
    if isinstance(value, list):
        return [plain_deserialize_value(item) for item in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    numpy = _import_numpy() if kind == "ndarray" else None
    if numpy is not None:
        array = numpy.frombuffer(base64.b64decode(value["data"]), dtype=numpy.dtype(value["dtype"]))
        return array.copy().reshape(value["shape"])
    if kind in ("dataclass", "enum"):
        try:
            cls = _import(value["class_path"])
        except (ImportError, AttributeError, ValueError) as error:  # as AReaL: the typed dict stays a dict
            logger.warning("cannot rebuild %s: %s", value.get("class_path"), error)
        else:
            if kind == "enum":
                return cls(value["value"])
            return cls(**{key: plain_deserialize_value(item) for key, item in value["data"].items()})
    return {key: plain_deserialize_value(item) for key, item in value.items()}


try:
    from areal.infra.rpc.serialization import deserialize_value, serialize_value
except ImportError:
    serialize_value = plain_serialize_value
    deserialize_value = plain_deserialize_value


__all__ = ["deserialize_value", "plain_deserialize_value", "plain_serialize_value", "serialize_value"]
