"""What the local cluster's worker pods run besides the demo: a stand-in worker server and the tests' engines; never
shipped (the release checks keep it out of every artifact).

- `reference_guard`: our standard-library stand-in of AReaL's worker server (``python -m
  localworker.reference_guard``), run by the unit tests and, through podrunner (tools/podrunner/), by the
  worker pods of the local cluster.
- `engines`: engines that stand-in creates for the tests (``localworker.engines.Counter``).
- `areal_engines`: the same probes in engines AReaL's real worker server accepts
  (``localworker.areal_engines.Counter``).

Importable from tools/ (on pytest's pythonpath and the virtualenv's path; podrunner puts it on the workers'
PYTHONPATH, and the real node's worker image holds this package: tools/realnode/images.py).
"""
