"""What drives a release over the layers below: its revisions and rollback (ReleaseDriver), finding its workers
(WorkerFinder) and forking them (ForkOperations)."""
