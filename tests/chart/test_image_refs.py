"""The adapter's split_image and the chart's image helpers together: every valid reference the adapter accepts is
rendered by the chart as the same reference, for a role's image and for the release's image."""

import pytest

from areal_workers.release.image_reference import image_reference_problem, split_image
from chartlib import container, role, sts

SHA = "sha256:" + "0123456789abcdef" * 4
IMAGES = [
    "ghcr.io/inclusionai/areal-runtime:v1.0.4",
    "areal",
    "localhost:5000/a/b",
    "localhost:5000",
    f"repo@{SHA}",
    f"registry.example.com/a/b:tag@{SHA}",
    "a_b/c__d",
    "a-b---c",
    "[::1]:5000/areal/runtime:v1",
]


def _same_reference(image: str) -> str:
    """`image` with the implied ':latest' of a reference that has neither tag nor digest."""
    return image if "@" in image or ":" in image.rsplit("/", 1)[-1] else f"{image}:latest"


def test_every_valid_form_renders_back_as_a_role_image(render):
    assert all(image_reference_problem(image) is None for image in IMAGES)
    # The release's own image has a tag: a role image without one must not inherit it.
    roles = {f"r{i}": role(image=split_image(image)) for i, image in enumerate(IMAGES)}
    docs = render({"image": {"repository": "ghcr.io/inclusionai/areal-runtime", "tag": "v9"}, "roles": roles})
    for i, image in enumerate(IMAGES):
        assert container(sts(docs, f"r{i}"))["image"] == _same_reference(image), image


@pytest.mark.parametrize("image", IMAGES)
def test_every_valid_form_renders_back_as_the_release_image(render, image):
    docs = render({"image": split_image(image), "roles": {"actor": role()}})
    assert container(sts(docs, "actor"))["image"] == _same_reference(image)


# (repository, tag) the chart renders into a reference the CLI refuses: the chart once rendered them, and the kubelet
# then failed each pod with InvalidImageName
REFUSED = [
    ("ghcr.io/InclusionAI/areal-runtime", "v1.0.4"),
    ("AREAL", "v1"),
    ("localhost:5000/Areal/runtime", "v1"),
    ("areal runtime", "v1"),
    ("areal//runtime", "v1"),
    ("areal/", "v1"),
    ("areal", "-v1"),
    ("areal", "v1:2"),
    ("areal", "sha256:" + "0123456789ABCDEF" * 4),
    ("areal", "sha256:0123"),
]


@pytest.mark.parametrize("repository,tag", REFUSED, ids=[f"{r}:{t}" for r, t in REFUSED])
def test_a_reference_the_cli_refuses_the_chart_refuses_too(render_error, repository, tag):
    reference = f"{repository}@{tag}" if tag.startswith("sha256:") else f"{repository}:{tag}"
    assert image_reference_problem(reference) is not None
    err = render_error({"roles": {"actor": role(image={"repository": repository, "tag": tag})}})
    assert f'the image of roles.actor, "{reference}"' in err and "is not a container image reference" in err, err
