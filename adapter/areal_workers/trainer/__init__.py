"""The trainer as Kubernetes objects, built as plain data: its batch/v1 Job from a submit file (`job`), its env entries
(`env`), its pod's NetworkPolicy (`network`) and its metrics port and PodMonitor (`metrics`). `areal-workers submit`
creates them; a Python caller may too."""
