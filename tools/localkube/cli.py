"""A real Kubernetes control plane on 127.0.0.1 for the tests and the demo.

etcd, kube-apiserver (RBAC + PodSecurity admission), kube-controller-manager and kube-scheduler run as
local processes built by `make tools`; KWOK plays the kubelet of fake nodes whose pods get loopback IPs
(127.20.<node>.x), so nothing ever connects off the machine, and podrunner (tools/podrunner/) plays the
kubelet's other half: it runs the pods' commands as local processes, for every namespace but those a test
runs itself. State lives under .tools/cluster/ and is wiped by `down`, so every `up` after a `down` starts
from an empty etcd and no process of the cluster or of its pods is left.

    python tools/localcluster.py up [--nodes 2 --cpu 64 --memory 512Gi --gpus 8 --pods 110]
                                    [--workers auto|areal|reference] [--real-node] [--kueue] [--argocd]
                                    [--registry]
    python tools/localcluster.py down
    python tools/localcluster.py status
    python tools/localcluster.py kubeconfig
    python tools/localcluster.py registry
    python tools/localcluster.py sa-kubeconfig NAMESPACE SERVICEACCOUNT OUT
    python tools/localcluster.py rbac NAMESPACE [--no-policy]

--real-node adds a real node beside the KWOK ones (tools/realnode/: kubelet, containerd, runc, CNI, CoreDNS; root,
one per machine): pods that select it run as real containers of locally built images. `down` stops it too.

A second cluster beside the first: set AREAL_WORKERS_CLUSTER_PORT_BASE (ports), AREAL_WORKERS_CLUSTER_DIR
(state; its admin kubeconfig is written inside it) and AREAL_WORKERS_CLUSTER_POD_OCTET (pods get
127.<octet>.<node>.x; default 20) to values of its own.

`up --kueue` also runs Kueue's controller manager (tools/localkube/addons/kueue.py); its webhooks act only in
namespaces labelled areal-workers.local/kueue=true. A later `up` without it keeps a running Kueue; `down` stops it.
`up --registry` also runs an OCI registry on 127.0.0.1 (tools/localkube/addons/registry.py: TLS from the cluster's CA,
a password); `registry` prints its address and account as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from localkube.addons.kueue import MANAGED_NAMESPACE_LABEL
from localkube.cluster import LocalCluster
from localkube.nodes import NodeShape
from localkube.pki import service_account_kubeconfig
from localkube.processes import say as _say
from localkube.rbac import RbacError, apply_rbac
from localkube.settings import WORKER_SERVERS, WORKERS_VARIABLE, ClusterError
from realnode.node import NODE_CHOICES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the control plane and podrunner (no-op when running), ensure the nodes")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--cpu", default=NodeShape.cpu)
    up.add_argument("--memory", default=NodeShape.memory)
    up.add_argument("--gpus", type=int, default=NodeShape.gpus)
    up.add_argument("--pods", type=int, default=NodeShape.pods)
    up.add_argument("--gpu-resource", default=NodeShape.gpu_resource)
    up.add_argument(
        "--workers",
        choices=WORKER_SERVERS,
        default=None,
        help="the server worker pods run: AReaL's rpc_server (areal, from `make areal-worker`), our "
        "stand-in localworker.reference_guard (reference), or areal when installed (auto). "
        f"Default ${WORKERS_VARIABLE} or auto; given, it restarts a podrunner running another",
    )
    up.add_argument(
        "--real-node",
        nargs="?",
        const="real",
        choices=NODE_CHOICES,
        default="kwok",
        help="real: also start the real node (kubelet + containerd running real containers; root; see "
        "tools/realnode/); auto: when this machine can run it; kwok (default): KWOK nodes only",
    )
    up.add_argument(
        "--kueue",
        action="store_true",
        help="also run Kueue's controller manager (its webhooks act in namespaces labelled "
        f"{MANAGED_NAMESPACE_LABEL}=true)",
    )
    up.add_argument(
        "--argocd",
        action="store_true",
        help="Argo CD too: redis, repo-server and application controller on 127.0.0.1 (`make tools` "
        "builds argocd; redis-server is Debian's); `down` stops them",
    )
    up.add_argument(
        "--registry",
        action="store_true",
        help="the OCI registry too: distribution's registry on 127.0.0.1 with TLS (the cluster's CA) and a password "
        "(`registry` prints how to log in); `down` stops it",
    )
    commands.add_parser(
        "down", help="stop every process, the pods' and Argo CD's included, and remove the cluster state"
    )
    commands.add_parser("status", help="exit 0 when the control plane and podrunner answer")
    commands.add_parser("kubeconfig", help="print the path of the admin kubeconfig")
    commands.add_parser("registry", help="print the running registry's address, account, password file and CA")
    sa = commands.add_parser("sa-kubeconfig", help="write a kubeconfig for a ServiceAccount token")
    sa.add_argument("namespace")
    sa.add_argument("service_account")
    sa.add_argument("out", type=Path)
    rbac = commands.add_parser(
        "rbac",
        help="apply rbac/ in a namespace, its admission policy bound to that namespace alone (localkube/rbac.py)",
    )
    rbac.add_argument("namespace")
    rbac.add_argument("--no-policy", action="store_true", help="leave rbac/cluster/admission-policy.yaml out")
    args = parser.parse_args(argv)

    cluster = LocalCluster()
    try:
        if args.command == "up":
            if args.nodes < 1:
                raise ClusterError("--nodes must be at least 1")
            shape = NodeShape(
                cpu=args.cpu, memory=args.memory, gpus=args.gpus, pods=args.pods, gpu_resource=args.gpu_resource
            )
            real_node = args.real_node == "real" or (args.real_node == "auto" and cluster.real_node_possible())
            cluster.up(
                args.nodes,
                shape,
                workers=args.workers,
                real_node=real_node,
                kueue=args.kueue,
                with_argocd=args.argocd,
                with_registry=args.registry,
            )
        elif args.command == "down":
            cluster.down()
        elif args.command == "status":
            for name, state in cluster.status().items():
                _say(f"{name}: {state}")
            running = cluster.is_running()
            _say("running" if running else "not running")
            return 0 if running else 1
        elif args.command == "kubeconfig":
            print(cluster.kubeconfig)
        elif args.command == "registry":
            registry = cluster.registry_credentials()
            print(json.dumps({**dataclasses.asdict(registry), "ca_file": str(registry.ca_file)}))
        elif args.command == "sa-kubeconfig":
            path = service_account_kubeconfig(cluster.kubeconfig, args.namespace, args.service_account, args.out)
            _say(f"wrote {path}")
        elif args.command == "rbac":
            policy = apply_rbac(cluster.kubeconfig, args.namespace, policy=not args.no_policy)
            _say(f"rbac/ applied in {args.namespace}" + (", its admission policy in force" if policy else ""))
    except (ClusterError, RbacError) as error:
        print(f"localcluster: {error}", file=sys.stderr)
        return 1
    return 0
