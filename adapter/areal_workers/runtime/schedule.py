"""How long a reaper may go without looking: the longest interval between two runs of its cron schedule."""

from __future__ import annotations

from datetime import datetime, timedelta

SAMPLE = timedelta(days=32)  # every minute, hour, weekday and day of month of the schedule comes up in it
# The macros a CronJob's schedule accepts (Kubernetes' cron parser), as five fields.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class ScheduleError(ValueError):
    """A cron schedule that cannot be read."""


def longest_interval(schedule: str, start: datetime) -> float:
    """Seconds between the two runs of `schedule` furthest apart, over the month after `start`."""
    from cronsim import CronSim, CronSimError  # only the reaper needs it: not an import of the trainer's package

    try:
        runs = CronSim(MACROS.get(schedule.strip(), schedule), start)
        previous = next(runs)
    except (CronSimError, StopIteration) as error:
        raise ScheduleError(f"cannot read cron schedule {schedule!r}: {error}") from error
    longest = 0.0
    for run in runs:
        longest = max(longest, (run - previous).total_seconds())
        if run - start > SAMPLE:
            break
        previous = run
    return longest
