"""The local cluster's command line: `python tools/localcluster.py up|down|status|kubeconfig|sa-kubeconfig|rbac ...`
(`--help` says more). The cluster itself is the package tools/localkube/."""

import sys

from localkube.cli import main

if __name__ == "__main__":
    sys.exit(main())
