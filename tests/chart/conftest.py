"""Fixtures of the chart tests; the helpers live in chartlib.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import chartlib


@pytest.fixture(name="render")
def render_fixture() -> Callable[..., list[dict]]:
    """render(values: dict) -> list[dict]: `helm template` the chart with these values, every document parsed."""
    return chartlib.render


@pytest.fixture(name="render_error")
def render_error_fixture() -> Callable[..., str]:
    """render_error(values: dict) -> str: helm's stderr for values it must reject."""
    return chartlib.render_error
