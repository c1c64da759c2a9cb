"""distkit/images.py: the checks of the reaper image before it is pushed."""

from __future__ import annotations

from distkit.images import REAPER_FILES, REAPER_USER, reaper_problems
from realnode.images import REAPER_LIB

VERSION = "1.2.3"
LIB = REAPER_LIB.lstrip("/")
GOOD_NAMES = {*REAPER_FILES, f"{LIB}/areal_workers-{VERSION}.dist-info/METADATA", f"{LIB}/areal_workers/__init__.py"}
GOOD_CONFIG = {"config": {"User": REAPER_USER, "Env": ["PATH=/usr/bin", f"PYTHONPATH={REAPER_LIB}"]}}


def test_an_image_with_the_package_helm_and_uid_1000_passes():
    assert reaper_problems(GOOD_CONFIG, GOOD_NAMES, VERSION) == []


def test_root_or_another_version_or_no_helm_is_refused():
    root = {"config": {**GOOD_CONFIG["config"], "User": "0"}}
    assert "runs as '0'" in reaper_problems(root, GOOD_NAMES, VERSION)[0]
    other = reaper_problems(GOOD_CONFIG, GOOD_NAMES, "1.2.4")
    assert other == [
        f"the reaper image does not hold areal-workers 1.2.4 ({LIB}/areal_workers-1.2.4.dist-info/METADATA)"
    ]
    no_helm = reaper_problems(GOOD_CONFIG, GOOD_NAMES - {"usr/local/bin/helm"}, VERSION)
    assert no_helm == ["the reaper image lacks usr/local/bin/helm"]
    no_path = reaper_problems({"config": {"User": REAPER_USER}}, GOOD_NAMES, VERSION)
    assert no_path == [f"the reaper image's PYTHONPATH is not {REAPER_LIB}"]
