"""The local cluster's real node (`localcluster.py up --real-node`): a kubelet with containerd, runc, CNI and
CoreDNS, running pods that ask for it as real containers of images built on this machine.

- node: RealNode, which starts and stops the node's processes;
- config: where the node lives and is addressed, and the files its processes read (pure);
- host: what the node changes on the host (sysctls, bridge, iptables, cgroups, mounts) and putting it back;
- images: the pause and worker images, built without a registry (`python -m realnode.images` builds the slow
  parts ahead, as `make tools` does);
- values: Helm values that put a role's pods on the node;
- pause.c: the pod sandbox's one program.
"""
