"""The `areal-workers` commands, one module per group: each takes a Session and returns an exit code."""
