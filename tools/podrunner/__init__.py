"""The process side of a kubelet for pods on KWOK nodes, so tests and the demo talk to real worker servers.

KWOK schedules pods onto fake nodes and gives them loopback IPs, but runs nothing. For every Running pod whose
first container has a `command` (KWOK starts such pods Running but not Ready, see tools/localkube/kwok-stages.yaml),
PodRunner:
- runs the container command as a local process, expanding `$(VAR)` from the container's env and the
  downward API (status.podIP, metadata.name/namespace/labels) exactly as the kubelet does; the worker binds
  the pod's own 127.x IP. Its `python` becomes a local interpreter (`python`), and the image's Python modules
  are swapped for local stand-ins (`module_map`; by default AReaL's rpc_server becomes
  localworker.reference_guard from tools/localworker, which has the same CLI and HTTP API; an empty map
  runs AReaL's real server from an interpreter that has it), with `pythonpath` prepended to PYTHONPATH for the
  engines it loads (and, when modules are swapped, tools/ for the stand-ins of localworker); the tools directory
  (.tools/bin: helm, kubectl) comes first on its PATH, and the host's KUBECONFIG and KUBERNETES_SERVICE_* are not
  passed on;
- for a pod whose container mounts its ServiceAccount's token (automountServiceAccountToken not false), requests
  that token (TokenRequest, bound to the pod) and hands the process a kubeconfig of its own (KUBECONFIG) and the
  apiserver's address (KUBERNETES_SERVICE_HOST/PORT), instead of writing into the host's /var/run/secrets;
- probes the container's readinessProbe (httpGet) and writes Ready / ContainersReady into the pod status;
- when the process exits, records it as the kubelet would (lastState.terminated, restartCount, not Ready) and
  restarts it after a back-off;
- stops the process (SIGTERM, then SIGKILL of it and its descendants after the grace period) when the pod is
  deleted, and, after every listing (start-up, a dropped watch, an expired resource version), stops the
  processes of pods that are no longer listed: a pod deleted while the watch was down leaves nothing behind.
Pods annotated `helm.sh/hook: test` are run to completion once and get phase Succeeded or Failed, so a real
`helm test` passes or fails on what the hook's command really did; cluster DNS names of StatefulSet pods
(`<hostname>.<subdomain>.<namespace>.svc.<domain>`) resolve to the pods' IPs inside that process.

Two ways to run it:
- a component of the local cluster (tools/localcluster.py starts `python -m podrunner ...`): one process
  for all namespaces except those labelled `areal-workers.dev/podrunner=private`, with a health endpoint and a
  ledger of the processes it started, so that `localcluster.py down` stops whatever it left;
- in a test (`PodRunner(kubeconfig, namespace, ...)`, the `pod_runner` fixture): threads of the test process
  for one private namespace, with the test's own interpreter and module map.

The modules: cli (the component's command line and health endpoint; __main__ runs it), watch (PodRunner, the watch
and reconcile loop), pods (pod -> command line, environment, probe), supervisor (starting, probing, restarting and
stopping processes), credentials (ServiceAccount kubeconfigs, the process environment's base), status (pod status
writes), logs (CRI log files, KWOK Logs objects), processes (process trees and the ledger), forked and fork_server
(worker pods forked from a process that imported their module once), fork_client (the `python` of process-mode
forks that asks the pod's fork server for them, launched by fork_python/python); dns/ is the resolver shim of hook
processes.
"""
