"""The `areal-workers` command: status, diagnosis, logs, history, rollback, render, doctor and removal of the
trials' worker releases, built on the adapter's own modules."""
