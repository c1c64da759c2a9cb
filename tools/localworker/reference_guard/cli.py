"""The command line (AReaL's guard flags) and the guard's lifecycle: serve until SIGTERM, then clean up."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from types import FrameType

from .forks import DEFAULT_LOG_ROOT
from .ports import PortAllocator, advertised_host, format_hostport
from .routes import GuardIdentity, GuardState
from .server import GuardServer

logger = logging.getLogger(__name__)

LISTENING_BANNER = "areal-guard listening on"
SERVE_POLL_SECONDS = 0.05  # how soon a stop signal is noticed


def build_parser() -> argparse.ArgumentParser:
    """AReaL's guard command line (areal.infra.rpc.guard.app.make_base_parser), same defaults
    except --host."""
    parser = argparse.ArgumentParser(
        prog="python -m localworker.reference_guard",
        description="Dependency-free reference implementation of AReaL's worker guard HTTP server.",
    )
    parser.add_argument("--port", type=int, default=0, help="port to serve on (0 = pick a free one)")
    # AReaL defaults to 0.0.0.0.  Here the default is loopback: the tests run one guard per fake pod
    # on that pod's own 127.x address in a shared network namespace, and nothing may listen on other
    # interfaces.  Containers pass --host 0.0.0.0 (or the pod IP) explicitly, as AReaL's fork does.
    parser.add_argument("--host", type=str, default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--experiment-name", type=str, required=True)
    parser.add_argument("--trial-name", type=str, required=True)
    parser.add_argument("--role", type=str, required=True)
    parser.add_argument("--worker-index", type=int, default=-1)
    parser.add_argument("--name-resolve-type", type=str, default="nfs", help="recorded only")
    parser.add_argument("--nfs-record-root", type=str, default="/tmp/areal/name_resolve", help="recorded only")
    parser.add_argument("--etcd3-addr", type=str, default="localhost:2379", help="recorded only")
    parser.add_argument(
        "--fileroot",
        type=str,
        default=None,
        help=f"root directory for forked workers' logs (default: {DEFAULT_LOG_ROOT})",
    )
    return parser


def parse_identity(argv: list[str] | None) -> tuple[argparse.Namespace, GuardIdentity]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.worker_index < 0:
        parser.error("--worker-index must be given and >= 0")
    if not 0 <= args.port <= 65535:
        parser.error("--port must be between 0 and 65535")
    identity = GuardIdentity(
        experiment_name=args.experiment_name,
        trial_name=args.trial_name,
        role=args.role,
        worker_index=args.worker_index,
        name_resolve_type=args.name_resolve_type,
        nfs_record_root=args.nfs_record_root,
        etcd3_addr=args.etcd3_addr,
        fileroot=args.fileroot,
    )
    return args, identity


class StopFlag:
    """Set from signal handlers; a plain attribute, since handlers must not take locks."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def request(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name


def serve_until_stopped(server: GuardServer, stop: StopFlag) -> None:
    # handle_request() with a timeout instead of serve_forever(): the loop notices the flag within
    # SERVE_POLL_SECONDS and nothing is raised asynchronously inside the server's own code.
    server.timeout = SERVE_POLL_SECONDS
    while stop.signal_name is None:
        server.handle_request()


def shut_down(state: GuardState) -> None:
    """AReaL's order: engines' destroy() first, then the forked children."""
    state.engines.destroy_all()
    state.children.kill_all()


def main(argv: list[str] | None = None) -> int:
    args, identity = parse_identity(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s areal-guard[{identity.role}/{identity.worker_index}] %(levelname)s %(message)s",
    )
    stop = StopFlag()
    signal.signal(signal.SIGTERM, stop.request)
    signal.signal(signal.SIGINT, stop.request)

    bind_host: str = args.host

    def new_state(bound_port: int) -> GuardState:
        ports = PortAllocator(bind_host)
        ports.hold(bound_port)
        return GuardState(identity=identity, host=advertised_host(bind_host), port=bound_port, ports=ports)

    try:
        server = GuardServer(bind_host, args.port, new_state)
    except OSError as error:
        logger.error("cannot listen on %s: %s", format_hostport(bind_host, args.port), error)
        return 1
    state = server.state
    print(f"{LISTENING_BANNER} {format_hostport(bind_host, state.port)}", flush=True)
    logger.info("pid %d serving %s (advertised as %s)", os.getpid(), identity.role, state.host)
    try:
        serve_until_stopped(server, stop)
        logger.info("received %s, shutting down", stop.signal_name)
    finally:
        shut_down(state)
        server.server_close()
    return 0
