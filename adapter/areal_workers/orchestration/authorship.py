"""Which revisions of a release a scheduler may undo: those it wrote, and those that were there when it adopted the
release (its predecessor's, whose Lease it took over). A revision that appeared after the adoption and that it did
not write is another controller's (a second scheduler of the trial, a person's `helm upgrade`), and a rollback that
would undo it is not made. Pure: revision numbers in, revision numbers out."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Authorship:
    adopted: int | None = None  # the release's revision when this scheduler adopted it (None: it found none)
    written: set[int] = field(default_factory=set)

    def adopt(self, revision: int | None) -> None:
        self.adopted, self.written = revision, set()

    def wrote(self, revision: int | None) -> None:
        if revision is not None:
            self.written.add(revision)

    def forget(self) -> None:
        """After an uninstall: helm numbers the next install's revisions from 1 again."""
        self.adopt(None)

    def foreign(self, after: int | None, through: int) -> list[int]:
        """The revisions in (after, through] that someone else wrote."""
        inherited = self.adopted or 0
        return [r for r in range((after or 0) + 1, through + 1) if r > inherited and r not in self.written]


# How helm leaves the revision of an upgrade that failed ("failed") or was interrupted (helm killed, the apiserver
# gone mid-operation: "pending-*" for ever, as nothing finishes it).
OWN_FAILURE_STATUSES = frozenset({"failed", "pending-install", "pending-upgrade"})


def is_own_failed_upgrade(before: int | None, current: int, status: str) -> bool:
    """After an upgrade from revision `before` failed, whether the release's latest revision `current` is the
    revision that upgrade wrote (right after the one it started from, failed or left pending by an interruption;
    the scheduler holds the trial's Lease, so no other controller writes meanwhile); a later revision is someone
    else's and is not undone."""
    return current == (before or 0) + 1 and status in OWN_FAILURE_STATUSES
