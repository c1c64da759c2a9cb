"""pods/images.py: the digests a revision's pods ran, recorded per revision on the topology ConfigMap."""

from __future__ import annotations

import json

from kubernetes import client

from areal_workers import naming
from areal_workers.pods.images import IMAGES_ANNOTATION, parse_recorded, ran_images, short, with_revision

DIGEST_A = "registry.local:5000/areal-workers/areal-worker@sha256:" + "a" * 64
DIGEST_B = "registry.local:5000/areal-workers/areal-worker@sha256:" + "b" * 64


def pod(role: str, *containers: tuple[str, str]) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"{role}-0", labels={naming.LABEL_ROLE: role}),
        status=client.V1PodStatus(
            container_statuses=[
                client.V1ContainerStatus(
                    name=name, image="x", image_id=image_id, ready=True, restart_count=0, started=True
                )
                for name, image_id in containers
            ]
        ),
    )


def test_each_role_lists_the_distinct_digests_of_its_worker_containers():
    pods = [
        pod("actor", ("worker", DIGEST_A), ("sidecar", "sha256:" + "c" * 64)),
        pod("actor", ("worker", DIGEST_A)),
        pod("rollout", ("worker", DIGEST_B)),
        pod("rollout", ("worker", DIGEST_A)),
    ]
    assert ran_images(pods) == {"actor": [DIGEST_A], "rollout": [DIGEST_A, DIGEST_B]}


def test_pods_without_a_started_worker_or_a_role_are_left_out():
    unstarted = client.V1Pod(metadata=client.V1ObjectMeta(name="a", labels={naming.LABEL_ROLE: "actor"}))
    unlabelled = pod("actor", ("worker", DIGEST_A))
    unlabelled.metadata.labels = {}
    pulling = pod("actor", ("worker", ""))
    assert ran_images([unstarted, unlabelled, pulling]) == {}


def test_a_revision_is_added_and_only_the_newest_are_kept():
    recorded = {1: {"actor": [DIGEST_A]}, 2: {"actor": [DIGEST_A]}, 3: {"actor": [DIGEST_B]}}
    value = with_revision(recorded, 4, {"actor": [DIGEST_B]}, keep=3)
    assert parse_recorded({IMAGES_ANNOTATION: value}) == {
        2: {"actor": [DIGEST_A]},
        3: {"actor": [DIGEST_B]},
        4: {"actor": [DIGEST_B]},
    }


def test_a_revision_recorded_again_is_replaced():
    value = with_revision({5: {"actor": [DIGEST_A]}}, 5, {"actor": [DIGEST_B]}, keep=10)
    assert json.loads(value) == {"5": {"actor": [DIGEST_B]}}


def test_an_annotation_edited_into_something_else_reads_as_nothing_recorded():
    assert parse_recorded(None) == {}
    assert parse_recorded({IMAGES_ANNOTATION: "not json"}) == {}
    assert parse_recorded({IMAGES_ANNOTATION: "[1, 2]"}) == {}
    assert parse_recorded({IMAGES_ANNOTATION: '{"x": {"actor": []}, "7": "y", "8": {"actor": "z"}}'}) == {8: {}}


def test_short_keeps_the_repository_and_twelve_hex_digits():
    assert short(DIGEST_A) == "areal-worker@sha256:aaaaaaaaaaaa"
    assert short("sha256:" + "d" * 64) == "sha256:dddddddddddd"
