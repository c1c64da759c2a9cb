"""The trainer as Kubernetes objects, built as plain data: its batch/v1 Job from a submit file (`job`), its env entries
(`env`) and its pod's NetworkPolicy (`network`). `areal-workers submit` creates them; a Python caller may too."""
