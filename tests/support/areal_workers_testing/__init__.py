"""Test and demo infrastructure for areal_workers; not part of the shipped wheel.

- `reference_guard`: our standard-library stand-in of AReaL's worker server (``python -m
  areal_workers_testing.reference_guard``), run by the unit tests and, through podrunner (tools/podrunner/), by the
  worker pods of the local cluster.
- `engines`: engines that stand-in creates for the tests (``areal_workers_testing.engines.Counter``).

Importable from tests/support (on pytest's pythonpath; worker processes get it on PYTHONPATH).
"""
