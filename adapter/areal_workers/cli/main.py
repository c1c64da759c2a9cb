"""areal-workers: see, debug, roll back and remove AReaL trials' workers on Kubernetes.

Each trial is one Helm release of the areal-workers chart (made by KubernetesScheduler or by helm/Argo CD).
Commands name it with --release, or --experiment and --trial; without them the only trial in the namespace.
The namespace: -n, else AREAL_K8S_NAMESPACE, else the kubeconfig context's, else "default".
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, cast

import yaml
from kubernetes.client.exceptions import ApiException
from rich.text import Text
from urllib3.exceptions import HTTPError

from .._version import __version__
from ..config import BUNDLED_CHART, CAPACITY_CHECKS
from ..errors import SchedulerError
from ..release.ownership import UntrustedRevisionError
from . import duration
from .commands import completion, reap, release, render, submit, up, workers
from .output import Format, console, emit, table
from .session import (
    EXIT_CLUSTER,
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_PROBLEM,
    EXIT_USAGE,
    CliError,
    Selection,
    Session,
    cluster_error,
    make_config,
)
from .trainer_env import env_references

PROGRAM = "areal-workers"

EXAMPLES = {
    "status": "  areal-workers status -n rl                 every trial in namespace rl\n"
    "  areal-workers status --experiment gsm8k --trial t1 --watch\n"
    "  areal-workers status -o json | jq '.trials[].workers[] | select(.ready|not)'",
    "diagnose": "  areal-workers diagnose actor                every actor worker\n"
    "  areal-workers diagnose actor/3 -o json",
    "logs": "  areal-workers logs actor/0 -f\n  areal-workers logs rollout/2 --previous --tail 100\n"
    "  areal-workers logs actor --since 10m        rank 0 of role actor, the last 10 minutes",
    "history": "  areal-workers history --release aw-gsm8k-t1-1a2b3c4d",
    "rollback": "  areal-workers rollback                      to the last all-ready revision (else the previous)\n"
    "  areal-workers rollback --dry-run            the target and what it changes in each role\n"
    "  areal-workers rollback 3 --timeout 15m",
    "up": "  areal-workers up -f job.yaml               create the job file's roles and wait until they answer\n"
    "  areal-workers up -f job.yaml --values platform.yaml --timeout 15m",
    "render": "  areal-workers render -f job.yaml            values and manifests create_workers would apply\n"
    "  areal-workers render --values platform.yaml -f job.yaml --show values\n"
    "  areal-workers render --values values.yaml   a values file alone: its roles (helm template + schema)",
    "doctor": "  areal-workers doctor -n rl                  permissions, chart, a probe worker reachable from here\n"
    "  areal-workers doctor --gpus-per-worker 8 --workers 4 --no-probe",
    "down": "  areal-workers down --experiment gsm8k --trial t1\n  areal-workers down --release aw-x-y-1a2b3c4d --yes",
    "submit": "  areal-workers submit -n rl -f trainer.yaml -- python train.py --config gsm8k.yaml\n"
    "  areal-workers submit --image registry.example.com/areal:v1.0.4 --dry-run -- python train.py\n"
    "  areal-workers submit -f trainer.yaml --env-from-secret WANDB_API_KEY=wandb:api-key -- python train.py",
    "reap": "  areal-workers reap -n rl                    uninstall trials whose trainer died (lease stale)\n"
    "  areal-workers reap --dry-run -o json",
    "completion": "  source <(areal-workers completion bash)\n  areal-workers completion zsh > ~/.zfunc/_areal-workers",
}
DURATION = "a duration as kubectl and helm take it: 90s, 15m, 1h30m; or plain seconds"
# How a job file's names and the command line's combine (up and render alike).
NAMES_AGREE = (
    "--experiment and --trial fill in names the file leaves out; one that differs from the file's is refused (exit 2)"
)


FORCE_HELP = (
    "also when the trial's trainer is alive: take its Lease at once (the trainer stops writing and raises "
    "LeaseLostError at its next call)"
)


def _common() -> argparse.ArgumentParser:
    """Options every command takes, before or after its name (SUPPRESS: whichever place set it wins)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("cluster and trial")
    group.add_argument("-n", "--namespace", default=argparse.SUPPRESS, help="namespace of the trials")
    group.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="kubeconfig file (default: $KUBECONFIG)")
    group.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context")
    group.add_argument("--release", default=argparse.SUPPRESS, help="the trial's helm release")
    group.add_argument("--experiment", default=argparse.SUPPRESS, help="the trial's experiment name")
    group.add_argument("--trial", default=argparse.SUPPRESS, help="the trial name")
    group.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default=argparse.SUPPRESS,
        help="output format (default: table)",
    )
    return common


def version_line() -> str:
    """The package's version and that of the chart it carries (equal in a release; a checkout may differ)."""
    chart = yaml.safe_load((BUNDLED_CHART / "Chart.yaml").read_text())
    return f"{PROGRAM} {__version__} (chart {chart['name']} {chart['version']}, for AReaL {chart['appVersion']})"


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    codes = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description=__doc__,
        parents=[common],
        epilog=f"exit codes:\n{codes}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            help=summary,
            description=summary,
            parents=[common],
            epilog="examples:\n" + EXAMPLES[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    status = command(
        "status",
        "roles and workers of one trial or every trial: ready, restarts, node, address, "
        "and why a worker is not ready (exit 1 when one is not)",
    )
    status.add_argument("-w", "--watch", action="store_true", help="redraw on every pod change (one watch)")
    status.add_argument(
        "--watch-seconds",
        type=duration.seconds,
        metavar="DURATION",
        default=None,
        help="stop watching after this long and exit as status would for the last frame (" + DURATION + ")",
    )
    diagnose = command(
        "diagnose",
        "why a role's or a worker's pods are not ready: the adapter's diagnosis with "
        "events, log tail and the fix (exit 1 when a problem is found)",
    )
    diagnose.add_argument("target", metavar="ROLE|ROLE/INDEX")
    logs = command(
        "logs",
        "a worker's log (a process fork's: its target pod's; a role alone: its rank 0, as kubectl logs takes a "
        "workload's first pod); while a restarted container has written nothing yet, the previous one's, with a note "
        "on stderr. -f ends when the container does (exit 0) or at Ctrl-C (exit 130)",
    )
    logs.add_argument("target", metavar="ROLE|ROLE/INDEX|POD")
    logs.add_argument("-f", "--follow", action="store_true", help="stream new lines")
    logs.add_argument("--tail", type=int, default=None, help="only the last N lines")
    logs.add_argument("-p", "--previous", action="store_true", help="the previous container (after a restart)")
    logs.add_argument(
        "--since", type=duration.seconds, metavar="DURATION", help="only lines newer than this (" + DURATION + ")"
    )
    command(
        "history",
        "the trial's release revisions, with the last one whose workers were all ready and the image digests "
        "its pods ran, which ones failed (and why) and what rolled them back",
    )
    rollback = command(
        "rollback",
        "back to a revision (default: the last all-ready one, else the previous), "
        "pods stuck on the abandoned revision replaced, then wait until ready; shows what each role changes first "
        "and asks on a terminal",
    )
    rollback.add_argument("revision", type=int, nargs="?", default=None)
    rollback.add_argument("--no-wait", action="store_true", help="do not wait for the workers to be ready")
    rollback.add_argument("--force", action="store_true", help=FORCE_HELP)
    rollback.add_argument(
        "--dry-run", action="store_true", help="only show the target and what it changes in each role (replicas, image)"
    )
    rollback.add_argument("-y", "--yes", action="store_true", help="do not ask on a terminal")
    rollback.add_argument(
        "--timeout",
        type=duration.seconds,
        metavar="DURATION",
        default="10m",
        help="how long to wait for the workers (" + DURATION + "; default 10m)",
    )
    up_cmd = command(
        "up",
        "create (or update) a trial's roles from a job file with KubernetesScheduler and wait "
        "until every worker answers (a failure is diagnosed and rolled back as for a trainer)",
    )
    up_cmd.add_argument("-f", "--job-file", required=True, help="the job file (see render); " + NAMES_AGREE)
    up_cmd.add_argument("--no-wait", action="store_true", help="do not wait for the workers")
    up_cmd.add_argument(
        "--capacity-check",
        choices=CAPACITY_CHECKS,
        default=None,
        help="whether a worker must fit some node before a change is written: reject (default), warn (a cluster "
        "autoscaler adds nodes), off (AREAL_K8S_CAPACITY_CHECK)",
    )
    up_cmd.add_argument(
        "--timeout",
        type=duration.seconds,
        metavar="DURATION",
        default="10m",
        help="how long to wait for each role (" + DURATION + "; default 10m)",
    )
    render_cmd = command(
        "render",
        "dry run without a cluster: the values and manifests of a job file and/or "
        "values files (helm template, schema-checked)",
    )
    render_cmd.add_argument(
        "-f",
        "--job-file",
        help="AReaL Job(s) as YAML: {role, replicas, tasks: "
        "[SchedulingSpec], scheduling_strategy} or {experiment, trial, "
        "jobs: [...]}; " + NAMES_AGREE,
    )
    render_cmd.add_argument(
        "--show",
        choices=("all", "values", "manifests"),
        default="all",
        help="what to print; helm template checks the values against the chart's schema either way",
    )
    doctor = command(
        "doctor",
        "preflight: the namespace exists, permissions (SelfSubjectAccessReview), the admission policy in force for "
        "this identity (a dry-run token Secret), chart and schema, the namespace's PodSecurity level, GPU capacity, "
        "a probe worker reachable from here (exit 1 when a check fails)",
    )
    doctor.add_argument("--gpus-per-worker", type=int, default=0)
    doctor.add_argument("--workers", type=int, default=1, help="workers that must fit (with --gpus-per-worker)")
    doctor.add_argument("--no-probe", action="store_true", help="skip creating a probe worker")
    for sub in (up_cmd, render_cmd, doctor):
        sub.add_argument(
            "--values",
            action="append",
            default=[],
            metavar="FILE",
            help="values file under the adapter's values (repeatable)",
        )
        sub.add_argument("--chart", default=None, help="chart directory or reference (default: the bundled one)")
    down = command("down", "delete a trial's release and its workers (asks first)")
    down.add_argument("-y", "--yes", action="store_true", help="do not ask")
    down.add_argument("--force", action="store_true", help=FORCE_HELP)
    down.add_argument(
        "--rank-zero-last",
        action="store_true",
        help="scale each role to rank 0 before removing it (rank 0 holds the TCPStore)",
    )
    submit_cmd = command(
        "submit",
        "run the trainer as a Job in the namespace (controller ServiceAccount, the "
        "label the NetworkPolicy admits, its workers owned by its pod), stream its log and "
        "exit with its exit code",
    )
    submit_cmd.add_argument(
        "-f",
        "--file",
        help="submit file: TrainerSpec fields (image, cpu, memory, gpu, env, "
        "volumes, volume_mounts, lease_grace_seconds, pod_security_context, container_security_context, ...)",
    )
    submit_cmd.add_argument("--image", help="the trainer's image (AReaL, areal-workers and helm in it)")
    submit_cmd.add_argument("--name", help="the Job's name (default: trainer-<script>)")
    submit_cmd.add_argument(
        "--restarts",
        type=int,
        metavar="N",
        help="new attempts after a failed one (default 3, AReaL's recover.retries; 0: one attempt): each takes "
        "over the last one's Lease and reclaims its workers, restarted in place",
    )
    submit_cmd.add_argument(
        "--env-from-secret",
        action="append",
        default=[],
        metavar="NAME=SECRET:KEY",
        help="the trainer's variable NAME from key KEY of Secret SECRET of the namespace (repeatable): the Job holds "
        "a reference, not the value; over the submit file's env",
    )
    submit_cmd.add_argument(
        "--env-from-configmap",
        action="append",
        default=[],
        metavar="NAME=CONFIGMAP:KEY",
        help="the trainer's variable NAME from key KEY of ConfigMap CONFIGMAP of the namespace (repeatable)",
    )
    submit_cmd.add_argument(
        "--dry-run", action="store_true", help="print the Job and its NetworkPolicy instead of creating them"
    )
    submit_cmd.add_argument("--detach", action="store_true", help="return once the Job is created")
    submit_cmd.add_argument(
        "--start-timeout",
        type=duration.seconds,
        metavar="DURATION",
        default="10m",
        help="how long the trainer pod may take to start (" + DURATION + "; default 10m)",
    )
    submit_cmd.add_argument(
        "trainer_command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...", help="the trainer's command"
    )
    reap_cmd = command(
        "reap",
        "uninstall the releases whose trainer's lease it has seen unchanged for longer than the "
        "grace period, over two runs at least the grace apart (by hand or from a CronJob), and wait for "
        "their pods to go; exits 1 if a release could not be reaped (the next run retries it)",
    )
    reap_cmd.add_argument("--dry-run", action="store_true", help="only show what would be reaped")
    reap_cmd.add_argument(
        "--schedule",
        metavar="CRON",
        default=os.environ.get(reap.SCHEDULE_VARIABLE) or None,
        help="the cron schedule this command runs on (default: $"
        + reap.SCHEDULE_VARIABLE
        + ", which the chart's reaper CronJob sets): a Lease last looked at more than two of its periods ago (the "
        "reaper stopped, the apiserver was away) starts its count again; without it, no limit",
    )
    reap_cmd.add_argument(
        "--timeout",
        type=duration.seconds,
        metavar="DURATION",
        default="5m",
        help="how long to wait for a release's pods to go (" + DURATION + "; default 5m)",
    )
    completion_cmd = command("completion", "print a shell completion script")
    completion_cmd.add_argument("shell", choices=("bash", "zsh"))
    return parser


def _session(args: argparse.Namespace) -> Session:
    overrides: dict[str, Any] = {}
    if getattr(args, "values", None):
        overrides["values_files"] = tuple(args.values)
    if getattr(args, "chart", None):
        overrides["chart"] = args.chart
    if getattr(args, "capacity_check", None):
        overrides["capacity_check"] = args.capacity_check
    config = make_config(
        getattr(args, "namespace", None), getattr(args, "kubeconfig", None), getattr(args, "context", None), **overrides
    )
    return Session(
        config,
        Selection(getattr(args, "release", None), getattr(args, "experiment", None), getattr(args, "trial", None)),
    )


def _doctor(session: Session, args: argparse.Namespace, fmt: Format) -> int:
    from .doctor import run_doctor  # imports the scheduler (probe); only this command needs it

    err = console(stderr=True)
    with err.status("checking") as spinner:
        checks = run_doctor(
            session.api,
            session.config,
            gpus_per_worker=args.gpus_per_worker,
            workers=args.workers,
            probe=not args.no_probe,
            progress=spinner.update,
        )
    if fmt != "table":
        emit({"namespace": session.namespace, "checks": [dataclasses.asdict(c) for c in checks]}, fmt)
    else:
        marks = {
            "pass": Text("pass", "green"),
            "fail": Text("FAIL", "red"),
            "warn": Text("warn", "yellow"),
            "skip": Text("skip"),
        }
        out = console()
        allowed = [c for c in checks if c.name.startswith("permission ") and c.status == "pass"]
        rows = []
        for check in checks:
            if check is (allowed[0] if allowed else None):  # one row for the permissions that pass (-o json: each)
                rows.append(
                    [
                        marks["pass"],
                        "permissions",
                        f"all {len(allowed)} permissions the adapter uses are allowed (-o json lists each)",
                    ]
                )
            if check not in allowed:
                rows.append([marks[check.status], check.name, check.detail])
        out.print(table(["", "CHECK", "DETAIL"], rows))
        for check in checks:
            if check.fix and check.status != "pass":
                out.print(Text.assemble((check.name, "bold"), f": {check.fix}"))
    return EXIT_PROBLEM if any(c.status == "fail" for c in checks) else EXIT_OK


def dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    fmt = cast(Format, getattr(args, "output", "table"))  # one of --output's choices
    if args.command == "completion":
        print(completion.bash_script(parser) if args.shell == "bash" else completion.zsh_script(parser), end="")
        return EXIT_OK
    session = _session(args)
    try:
        if args.command == "status":
            return workers.status(session, fmt, args.watch, args.watch_seconds)
        if args.command == "diagnose":
            return workers.diagnose(session, args.target, fmt)
        if args.command == "logs":
            return workers.logs(session, args.target, args.follow, args.tail, args.previous, args.since)
        if args.command == "history":
            return release.history(session, fmt)
        if args.command == "rollback":
            return release.rollback(
                session, args.revision, not args.no_wait, args.timeout, args.force, fmt, args.dry_run, args.yes
            )
        if args.command == "up":
            return up.up(
                session,
                args.job_file,
                getattr(args, "experiment", None),
                getattr(args, "trial", None),
                not args.no_wait,
                args.timeout,
                fmt,
            )
        if args.command == "render":
            return render.render(
                session, args.job_file, getattr(args, "experiment", None), getattr(args, "trial", None), args.show, fmt
            )
        if args.command == "doctor":
            return _doctor(session, args, fmt)
        if args.command == "submit":
            command_line = args.trainer_command[1:] if args.trainer_command[:1] == ["--"] else args.trainer_command
            return submit.submit(
                session,
                args.file,
                {
                    "image": args.image,
                    "name": args.name,
                    "restarts": args.restarts,
                    "env": env_references(args.env_from_secret, args.env_from_configmap),
                },
                command_line,
                args.dry_run,
                args.detach,
                args.start_timeout,
                fmt,
            )
        if args.command == "reap":
            return reap.reap(session, args.dry_run, args.timeout, args.schedule, fmt)
        if args.command == "down":
            return release.down(session, args.yes, args.rank_zero_last, args.force, fmt)
    except BrokenPipeError:  # stdout's reader is gone (a ConnectionError, but not the cluster's): main ends quietly
        raise
    except (ApiException, HTTPError, ConnectionError) as error:  # a request no command caught: its cause named
        raise session.cluster_error(error, args.command) from None
    finally:
        session.close()
    raise AssertionError(f"unhandled command {args.command}")


def main(argv: Sequence[str] | None = None) -> int:
    logging.getLogger("pyhelm3").setLevel(logging.ERROR)  # its "command failed" warnings: the CLI reports failures
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = _run(args, parser)
        sys.stdout.flush()  # a reader gone shows here, not in the interpreter's last flush (a warning, exit 120)
    except BrokenPipeError:
        # Nothing more can be shown; /dev/null takes what is still buffered, so the exit is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    return code


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The command, its failures as a message on stderr and an exit code."""
    try:
        return dispatch(args, parser)
    except BrokenPipeError:  # stdout's reader is gone (| head), not the cluster's connection: main ends quietly
        raise
    except CliError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except UntrustedRevisionError as error:  # a recorded revision not the chart's, refused before helm acted on it
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except SchedulerError as error:  # from the adapter's release driver: helm's message included
        print(f"error: {error}", file=sys.stderr)
        return EXIT_CLUSTER
    except (ApiException, HTTPError, ConnectionError) as error:
        print(f"error: {cluster_error(error, args.command)}", file=sys.stderr)
        return EXIT_CLUSTER
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
