"""`python -m podrunner ...`: the local cluster's podrunner component (podrunner.cli)."""

import sys

from podrunner.cli import main

sys.exit(main())
