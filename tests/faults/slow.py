"""A task that holds its message unacknowledged for a while; a worker of a regression test
loads it with `--include tests.faults.slow`."""

import time
from pathlib import Path

from celery import shared_task


@shared_task(name="tests.faults.slow.hold", acks_late=True, ignore_result=True)
def hold(path, seconds):
    time.sleep(seconds)
    Path(path).write_text("done")
