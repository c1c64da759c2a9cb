"""Errors as AReaL's guard answers them, and reading request bodies and their fields."""

from __future__ import annotations

import contextlib
import enum
import json
from http import HTTPStatus
from typing import Any

JsonObject = dict[str, Any]
JSON_SCALARS = (str, int, float, bool)


class HttpError(Exception):
    """Ends a request with ``status`` and ``{"error": message, **extra}``."""

    def __init__(self, status: HTTPStatus, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


def bad_request(message: str) -> HttpError:
    return HttpError(HTTPStatus.BAD_REQUEST, message)


def internal_error(message: str) -> HttpError:
    """AReaL's catch-all answer when a handler raised."""
    return HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, f"Internal server error: {message}")


# --------------------------------------------------------------------------- request bodies


class BodyRule(enum.Enum):
    NONE = "none"  # GET: no body
    GUARD = "guard"  # AReaL's guard routes: get_json(silent=True), None -> 400
    ENGINE = "engine"  # AReaL's engine routes: get_json(silent=True) or {}


def is_json_content_type(content_type: str) -> bool:
    """Flask's ``Request.is_json``."""
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


def decode_body(rule: BodyRule, content_type: str, raw_body: bytes) -> JsonObject:
    if rule is BodyRule.NONE:
        return {}
    data: Any = None
    if is_json_content_type(content_type):
        with contextlib.suppress(ValueError):  # JSONDecodeError and UnicodeDecodeError included
            data = json.loads(raw_body)
    if rule is BodyRule.GUARD and data is None:
        raise bad_request("Invalid JSON in request body")
    if rule is BodyRule.ENGINE and not data:
        data = {}
    if not isinstance(data, dict):
        raise internal_error(f"the request body must be a JSON object, not {type(data).__name__}")
    return data


# --------------------------------------------------------------------------- request fields


def require_str(body: JsonObject, key: str) -> str:
    value = body.get(key)
    if value is None:
        raise bad_request(f"Missing '{key}' field in request")
    if not isinstance(value, str) or not value:
        raise bad_request(f"'{key}' must be a non-empty string")
    return value


def require_present(body: JsonObject, key: str) -> Any:
    value = body.get(key)
    if value is None:
        raise bad_request(f"Missing '{key}' field in request")
    return value


def require_scalar(body: JsonObject, key: str) -> str | int | float | bool:
    value = require_present(body, key)
    if not isinstance(value, JSON_SCALARS):
        raise bad_request(f"'{key}' must be a string or a number")
    return value


def optional_list(body: JsonObject, key: str) -> list[Any]:
    """Like AReaL's pydantic field ``list[Any] = []``: absent is empty, null is invalid."""
    value = body.get(key, [])
    if not isinstance(value, list):
        raise bad_request(f"'{key}' must be a list")
    return value


def optional_dict(body: JsonObject, key: str) -> JsonObject:
    """Like AReaL's pydantic field ``dict[str, Any] = {}``: absent is empty, null is invalid."""
    value = body.get(key, {})
    if not isinstance(value, dict):
        raise bad_request(f"'{key}' must be a dictionary")
    return value
