"""The second kube-apiserver of a local cluster (LocalCluster.second_apiserver), as data: the cluster's own API server
on the same etcd, with the same flags, but for its name and port, so a test that restarts it restarts what its
scheduler talks to and nothing the other tests use."""

from __future__ import annotations

import localkube.components
from localkube.cluster import LocalCluster
from localkube.settings import Ports


def test_the_second_apiserver_is_the_first_on_its_own_port(tmp_path, monkeypatch):
    monkeypatch.setattr(localkube.components, "binary", lambda name: f"/tools/{name}")  # none built: no cluster tier
    cluster = LocalCluster(ports=Ports(base=30000), state_dir=tmp_path)
    [first] = [c for c in cluster.control_plane() if c.name == "kube-apiserver"]
    second = cluster.second_apiserver()
    assert second.name == "kube-apiserver-second" and second.pidfile != first.pidfile and second.log != first.log
    assert "--secure-port=30003" in first.argv and "--secure-port=30008" in second.argv
    assert [a for a in second.argv if not a.startswith("--secure-port=")] == [
        a for a in first.argv if not a.startswith("--secure-port=")
    ]
    assert "--etcd-servers=http://127.0.0.1:30000" in second.argv and "--bind-address=127.0.0.1" in second.argv
    assert second.health_url == "https://127.0.0.1:30008/readyz"
    assert cluster.ports.all()["kube-apiserver-second"] == ("127.0.0.1", 30008)  # checked free by `up`, `down`
