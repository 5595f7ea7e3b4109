from django.db.models.signals import post_save
from django.dispatch import Signal

# Sent after the commit that appended audit events, with `events` (a list of AuditEvent).
# The dashboard listens to stream them live; the audit trail does not know who listens.
audit_recorded = Signal()


def saved(instance, update_fields=None):
    """Tell post_save's receivers (the dashboard's live views, the loopback page) of a row
    saved by a conditional UPDATE, as `Model.save` would have."""
    post_save.send(
        type(instance),
        instance=instance,
        created=False,
        update_fields=None if update_fields is None else frozenset(update_fields),  # as save()
        raw=False,
        using=instance._state.db,
    )
