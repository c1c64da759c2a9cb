"""Which image each workload's pods ran, by digest: what the node's runtime resolved the tag to (the container
status' imageID), not the tag the values asked for. Recorded per all-ready revision on the release's topology
ConfigMap, so `areal-workers history` shows a tag that moved between revisions."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from kubernetes import client

from .. import naming

WORKER_CONTAINER = "worker"
IMAGES_ANNOTATION = "areal.io/revision-images"

# revision -> workload -> the distinct image references with digest its pods ran
RevisionImages = dict[int, dict[str, list[str]]]


def ran_images(pods: Iterable[client.V1Pod]) -> dict[str, list[str]]:
    """workload -> the sorted distinct imageIDs of its pods' worker containers (pods not yet started: none)."""
    found: dict[str, set[str]] = {}
    for pod in pods:
        workload = (pod.metadata.labels or {}).get(naming.LABEL_ROLE)
        statuses = (pod.status.container_statuses if pod.status else None) or []
        for status in statuses:
            if workload and status.name == WORKER_CONTAINER and status.image_id:
                found.setdefault(workload, set()).add(status.image_id)
    return {workload: sorted(ids) for workload, ids in sorted(found.items())}


def parse_recorded(annotations: Mapping[str, str] | None) -> RevisionImages:
    """The recorded images of each revision; an annotation someone edited into something else reads as none."""
    try:
        recorded = json.loads((annotations or {}).get(IMAGES_ANNOTATION, "{}"))
    except json.JSONDecodeError:
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {
        int(revision): {str(w): [str(i) for i in ids] for w, ids in workloads.items() if isinstance(ids, list)}
        for revision, workloads in recorded.items()
        if str(revision).isdigit() and isinstance(workloads, dict)
    }


def with_revision(recorded: RevisionImages, revision: int, images: dict[str, list[str]], keep: int) -> str:
    """The annotation's new value: `images` for `revision`, and the newest `keep` revisions (helm's history_max)."""
    merged = {**recorded, revision: images}
    newest = sorted(merged)[-max(keep, 1) :]
    return json.dumps({str(r): merged[r] for r in newest}, sort_keys=True, separators=(",", ":"))


def short(image_id: str) -> str:
    """`repository@sha256:<12 hex>`: the registry host dropped, the digest cut to what a person compares."""
    name, _, digest = image_id.rpartition("@")
    repository = name.rsplit("/", 1)[-1] if name else ""
    algorithm, _, hexdigits = digest.partition(":")
    cut = f"{algorithm}:{hexdigits[:12]}" if hexdigits else digest
    return f"{repository}@{cut}" if repository else cut
