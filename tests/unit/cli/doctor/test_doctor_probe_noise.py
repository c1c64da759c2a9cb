"""doctor's probe release is deleted within the command: the driver's shared-storage warning, meant for a trial's
storage, is left out while it runs (it was printed on every doctor), and only then."""

from __future__ import annotations

import logging

from test_doctor import CONFIG, Probe

from areal_workers.cli.doctor.probe import probe_worker
from areal_workers.orchestration import driver as release_driver

WARNING = "release x: cluster.fileroot /tmp/areal on no volume every worker mounts"


def test_the_probe_leaves_the_shared_storage_warning_out_and_only_while_it_runs(caplog):
    def health(ip: str, port: str) -> None:
        release_driver.logger.warning(WARNING, extra={release_driver.UNSHARED_PATHS: ["cluster.fileroot /tmp/areal"]})
        release_driver.logger.warning("another warning of the driver")

    with caplog.at_level(logging.WARNING, logger="areal_workers"):
        assert probe_worker(CONFIG, Probe(), health).status == "pass"
        messages = [r.getMessage() for r in caplog.records]
        assert WARNING not in messages and "another warning of the driver" in messages
        release_driver.logger.warning(WARNING, extra={release_driver.UNSHARED_PATHS: ["cluster.fileroot /tmp/areal"]})
    assert [r.getMessage() for r in caplog.records].count(WARNING) == 1  # a trial's own release still warns
