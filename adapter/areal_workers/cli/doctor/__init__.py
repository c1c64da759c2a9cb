"""Preflight checks of `areal-workers doctor`: can this identity, from this machine, run AReaL's workers here?
Each check passes, fails, warns or is skipped, with what was found and, unless it passed, what to change:
the API server answers; the namespace exists (when it does not, that is the one failure, with how to create it, and
nothing namespaced is checked); one SelfSubjectAccessReview per verb and resource of rbac/role.yaml (shipped in the
wheel) in the namespace, plus listing nodes (optional: a warning); whether rbac/cluster/admission-policy.yaml
refuses this identity a token Secret there (a server-side dry run); `helm template` of the chart and values files for a
one-role probe (the schema too); the namespace's PodSecurity enforce level against the level the rendered workers
need; how many workers of `gpus_per_worker` GPUs the nodes hold now, judged with the
adapter's own `diagnosis.node_fit` on the pod template the chart rendered; the AReaL installed beside doctor (the
trainer's, when doctor runs where it does) against the versions areal-workers is tested with; and a one-worker
release created by KubernetesScheduler itself, whose /health is then fetched from this process on the pod IP (as the
controller calls workers), deleted whatever happened.
"""

from .areal_version import TESTED_AREAL, check_areal_version
from .check import Check
from .gpus import gpu_capacity
from .permissions import ROLE_FILE, Access, permission_check, role_accesses
from .podsecurity import needed_level, pod_security_check
from .probe import probe_worker
from .run import run_doctor

__all__ = [
    "Access",
    "Check",
    "ROLE_FILE",
    "TESTED_AREAL",
    "check_areal_version",
    "gpu_capacity",
    "needed_level",
    "permission_check",
    "pod_security_check",
    "probe_worker",
    "role_accesses",
    "run_doctor",
]
