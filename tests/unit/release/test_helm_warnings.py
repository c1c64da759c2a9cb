"""What of pyhelm3's logging reaches the trainer's log: its warning for the `helm status` by which the adapter learns
that a release does not exist yet is dropped (every first install would show "command failed"); the warnings of
other failed commands stay."""

from __future__ import annotations

import logging

import areal_workers.release.client  # noqa: F401  (installs the filter on pyhelm3's logger)


def test_the_missing_release_probe_is_dropped_and_other_failures_kept(caplog):
    logger = logging.getLogger("pyhelm3.command")
    with caplog.at_level(logging.WARNING, logger="pyhelm3.command"):
        logger.warning("command failed: %s", "/usr/bin/helm status aw-exp-t1-0a1b2c3d --output json --namespace rl")
        logger.warning("command failed: %s", "/usr/bin/helm upgrade aw-exp-t1-0a1b2c3d /chart --install")
    assert [record.getMessage() for record in caplog.records] == [
        "command failed: /usr/bin/helm upgrade aw-exp-t1-0a1b2c3d /chart --install"
    ]
