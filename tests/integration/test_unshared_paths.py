"""Without a shared volume the chart's topology names AReaL's nfs paths that no volume covers, and the scheduler warns
once when it creates workers, as AReaL's validate_shared_path does (the shared volume itself: test_shared_storage.py,
on the real node). The warning comes from what the chart rendered, so KWOK nodes do."""

from __future__ import annotations

import logging

from clusterlib import job


def test_without_a_shared_volume_the_scheduler_warns_of_the_unshared_paths(make_scheduler, caplog):
    scheduler = make_scheduler()
    with caplog.at_level(logging.WARNING, logger="areal_workers"):
        scheduler.create_workers(job("actor", 1))
    warnings = [r.getMessage() for r in caplog.records if "no volume every worker mounts" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "cluster.fileroot /" in warnings[0] and ", cluster.nameResolve.nfsRecordRoot /" in warnings[0]
    assert "set the chart's sharedStorage" in warnings[0]
