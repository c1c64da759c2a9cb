"""`areal-workers doctor`: the preflight checks (run.py), their result (check.py) and the GPU check (gpus.py)."""

from .run import Access, Check, ROLE_FILE, gpu_capacity, permission_check, probe_worker, role_accesses, run_doctor

__all__ = ["Access", "Check", "ROLE_FILE", "gpu_capacity", "permission_check", "probe_worker", "role_accesses",
           "run_doctor"]
