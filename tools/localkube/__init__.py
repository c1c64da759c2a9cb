"""The local cluster: a real Kubernetes control plane on 127.0.0.1 with KWOK's fake nodes, for the tests, the
benchmarks and the demo (`python tools/localcluster.py --help`).

- cluster: LocalCluster, which starts, checks and stops everything below;
- cli: the command line of tools/localcluster.py;
- settings: paths, ports, loopback addresses, the environment variables of a second cluster, the worker server;
- processes: a component's process (pidfile, log, health check) and starting and stopping it;
- components: the command lines of the control plane, KWOK and podrunner;
- pki: the cluster CA, certificates and kubeconfigs;
- nodes: the fake nodes' Node objects;
- addons/: Kueue and Argo CD, run on request beside the cluster;
- kwok-stages.yaml: KWOK's pod and node lifecycle (which pods turn Ready, which podrunner runs).

The real node is tools/realnode/, the pods' processes tools/podrunner/.
"""
