"""AReaL's etcd3 name_resolve against a real etcd: the chart's `cluster.nameResolve.type: etcd3` and `etcd3Addr`
reach AReaL's rpc_server as flags, each worker registers itself in the etcd, the trainer (AReaL's name_resolve in
AReaL's environment on the host) finds both workers there, and the workers find the trainer's record. Nothing is
written under the nfs record root.

The etcd is one of this test's own (the `etcd` of `make tools`), not the control plane's: on a loopback port for the
workers of KWOK nodes (AReaL lane), on the real node's bridge address for the worker containers of the real node
(serial-node lane), each on a port of its own. AReaL's
etcd3 client (python-etcd3 0.12.0) imports only with PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python, which the role's
`env` sets for the workers and the test for the trainer (tools/install/areal-worker-requirements.txt says why).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from clusterlib import counter_engine, job
from real_node_trials import close_all, scheduler_factory, task
from realnode.config import NODE_IP
from repo_paths import AREAL_WORKER_PYTHON, TOOLS_BIN

REAL_NODE_ENGINE = "localworker.areal_engines.Counter"  # the real node's image holds tools/localworker/areal_engines.py
PURE_PYTHON_PROTOBUF = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
TRAINER = """
import json, sys
from areal.api.cli_args import NameResolveConfig
from areal.utils import name_resolve
name_resolve.reconfigure(NameResolveConfig(type="etcd3", etcd3_addr=sys.argv[1]))
name_resolve.add(sys.argv[2], "trainer-at-127.0.0.1:1", replace=True)
print(json.dumps(sorted(name_resolve.get_subtree(sys.argv[3]))))
"""


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def run_etcd(host: str, tmp_path) -> Iterator[str]:
    """A one-member etcd on `host` (client and peer ports of its own); its address, host:port."""
    client, peer = f"http://{host}:{free_port(host)}", f"http://{host}:{free_port(host)}"
    log = (tmp_path / "etcd.log").open("w")
    process = subprocess.Popen(
        [str(TOOLS_BIN / "etcd"), "--name", "default", "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", client, "--advertise-client-urls", client,
         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=5) as answer:
                    if json.load(answer).get("health") == "true":
                        break
            except OSError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "etcd.log").read_text()
            time.sleep(0.2)
        yield client.removeprefix("http://")
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.fixture
def etcd(tmp_path) -> Iterator[str]:
    yield from run_etcd("127.0.0.1", tmp_path)


@pytest.fixture
def bridge_etcd(real_node, tmp_path) -> Iterator[str]:
    """On the real node's bridge address, which the run made and its pods reach."""
    yield from run_etcd(NODE_IP, tmp_path)


def etcd3_values(address: str) -> dict:
    return {"cluster": {"nameResolve": {"type": "etcd3", "etcd3Addr": address}}}


def find_each_other(scheduler, workers, engine: str, etcd: str, records) -> None:
    """The trainer (on the host) sees both workers' records, both workers see the trainer's and each other's, and
    nothing is written under the nfs record root."""
    addresses = sorted(f"{w.ip}:{w.worker_ports[0]}" for w in workers)
    # AReaL's keys: USER (the chart's `areal`)/experiment/trial/workers/role/index.
    root = f"areal/exp/{scheduler.trial_name}"
    workers_root, trainer_key = f"{root}/workers/actor", f"{root}/trainer"

    found = subprocess.run(
        [str(AREAL_WORKER_PYTHON), "-c", TRAINER, etcd, trainer_key, workers_root],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **PURE_PYTHON_PROTOBUF},
    )
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout.strip().splitlines()[-1]) == addresses  # the trainer sees both workers

    for worker in workers:
        asyncio.run(scheduler.create_engine(worker.id, engine, "probe"))
        assert scheduler.call_engine(worker.id, "name_records", "probe", trainer_key) == ["trainer-at-127.0.0.1:1"]
        assert scheduler.call_engine(worker.id, "name_records", "probe", workers_root) == addresses
    assert not records.exists() or not any(path.is_file() for path in records.rglob("*"))


@pytest.mark.areal_worker
def test_workers_and_the_trainer_find_each_other_through_etcd3(make_scheduler, etcd, tmp_path):
    values = {**etcd3_values(etcd), "workerDefaults": {"env": PURE_PYTHON_PROTOBUF}}
    scheduler = make_scheduler(extra_values=values)
    scheduler.create_workers(job("actor", 2))
    find_each_other(
        scheduler, scheduler.get_workers("actor"), counter_engine(), etcd, tmp_path / "areal" / "name_resolve"
    )


@pytest.mark.serial_cluster
@pytest.mark.real_node
def test_worker_containers_of_the_real_node_and_the_trainer_find_each_other_through_etcd3(
    bridge_etcd, namespace, kubeconfig, helm_executable, tmp_path
):
    make, made = scheduler_factory(kubeconfig, helm_executable, namespace, tmp_path)
    try:
        shared = tmp_path / "areal"  # scheduler_factory's, mounted into the workers: the nfs root stays empty
        values = etcd3_values(bridge_etcd)
        values["cluster"]["fileroot"] = str(shared)
        values["cluster"]["nameResolve"]["nfsRecordRoot"] = str(shared / "name_resolve")
        scheduler = make(worker_defaults={"env": PURE_PYTHON_PROTOBUF}, values=values)
        scheduler.create_workers(job("actor", 2, [task()]))
        workers = scheduler.get_workers("actor")
        find_each_other(scheduler, workers, REAL_NODE_ENGINE, bridge_etcd, shared / "name_resolve")
    finally:
        close_all(made)
