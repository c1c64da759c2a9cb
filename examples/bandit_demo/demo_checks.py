"""How the bandit demo reports a surprise: a step that did not do what the demo expects of the scheduler."""

from __future__ import annotations


class DemoFailure(Exception):
    """A step did not do what the demo expects of the scheduler."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise DemoFailure(message)
