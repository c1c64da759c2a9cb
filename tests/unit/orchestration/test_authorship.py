"""Which revisions a scheduler may undo: its own, and those it found when it adopted the release; never one that
another controller wrote since (pure)."""

from __future__ import annotations

from areal_workers.orchestration.authorship import Authorship, is_own_failed_upgrade


def test_revisions_written_by_others_after_the_adoption_are_foreign():
    fresh = Authorship()
    fresh.wrote(1)
    fresh.wrote(2)
    assert fresh.foreign(None, 2) == [] and fresh.foreign(1, 4) == [3, 4]
    adopted = Authorship()
    adopted.adopt(7)  # a restarted trainer inherits its predecessor's revisions
    adopted.wrote(9)
    assert adopted.foreign(5, 9) == [8]
    adopted.forget()  # uninstalled: helm numbers from 1 again
    adopted.wrote(1)
    assert adopted.foreign(None, 1) == []


def test_only_the_failed_revision_right_after_the_one_an_upgrade_started_from_is_its_own():
    assert is_own_failed_upgrade(4, 5, "failed") and is_own_failed_upgrade(None, 1, "failed")
    assert not is_own_failed_upgrade(4, 6, "failed")  # someone else wrote 5 in between
    # Left pending by its own interrupted helm (killed, the apiserver gone): the scheduler holds the Lease, so no
    # other controller's upgrade runs meanwhile.
    assert is_own_failed_upgrade(4, 5, "pending-upgrade") and is_own_failed_upgrade(None, 1, "pending-install")
    assert not is_own_failed_upgrade(4, 6, "pending-upgrade")
    assert not is_own_failed_upgrade(4, 5, "deployed")
