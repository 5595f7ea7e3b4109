from celery import shared_task

from a2a import push


@shared_task(name=push.PUSH_TASK, ignore_result=True)
def push_notifications(config_pk):
    """A partner's webhook: record its task's changes, POST the due ones in order."""
    push.notify(config_pk)


@shared_task(name="a2a.push_sweep", ignore_result=True)
def push_sweep():
    """Beat: take up webhooks whose delivery is due or whose task is still live."""
    push.sweep()
