"""How `areal-workers up` prints a scheduler error: the diagnosis once, then the rollback in one line, and an exit
code only when a container exited (a repeated diagnosis or an "exit code -1" only hid the cause)."""

from __future__ import annotations

import logging

from areal_workers.cli.commands import up
from areal_workers.errors import WorkerFailedError, WorkerTimeoutError, attach_diagnosis
from areal_workers.orchestration import driver

PULL = (
    "aw-exp-up-1a2b3c4d-areal-workers-broken-0 (container worker) on node kwok-node-0: ErrImagePull [fatal]\n"
    "  advice: registry.invalid/areal:v1 cannot be pulled: fix the image reference or the pull secret"
)


def failed(exit_code: int, diagnosis: str) -> WorkerFailedError:
    """As the scheduler raises it: AReaL's constructor (the diagnosis as stderr), the diagnosis attached, the
    driver's rollback note."""
    error = WorkerFailedError("broken/0", exit_code, diagnosis)
    attach_diagnosis(error, diagnosis)
    error.add_note("rolled back release aw-exp-up-1a2b3c4d to revision 1")
    return error  # type: ignore[return-value]


def test_an_image_pull_is_printed_once_without_exit_code_wording():
    text = up.failure_text(failed(-1, PULL))
    assert text.count("ErrImagePull [fatal]") == 1, text
    assert "exit code" not in text and "Stderr output" not in text
    assert text.splitlines()[0] == "worker broken/0 cannot become ready"
    assert text.splitlines()[-1] == "rolled back release aw-exp-up-1a2b3c4d to revision 1"
    assert text.count("rolled back") == 1


def test_a_container_that_exited_is_named_with_its_code():
    text = up.failure_text(failed(3, "broken-0: CrashLoopBackOff [fatal]\n  exit code: 3"))
    assert text.splitlines()[0] == "worker broken/0 exited with code 3"
    assert text.count("CrashLoopBackOff") == 1 and "Stderr output" not in text


def test_a_time_out_keeps_its_message_and_its_diagnosis_once():
    error = WorkerTimeoutError("actor", 30.0)
    attach_diagnosis(error, "actor: 0/1 workers ready")
    text = up.failure_text(error)
    assert text.startswith("Timeout waiting for worker 'actor'") and text.count("0/1 workers ready") == 1


def test_the_drivers_rollback_record_is_left_out_while_up_prints_the_error(capsys):
    record = driver.logger.makeRecord(
        driver.logger.name, logging.WARNING, __file__, 1, "rolled back", (), None, extra={"in_raised_error": True}
    )
    other = driver.logger.makeRecord(driver.logger.name, logging.WARNING, __file__, 1, "other", (), None)
    assert not up._not_in_the_error(record) and up._not_in_the_error(other)
