"""Ceremony lifecycle hooks, so the gateway needs no passkey-specific calls."""

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver

from held.models import Ceremony
from passkey import loopback, notify


@receiver(post_save, sender=Ceremony, dispatch_uid="passkey.ceremony_saved")
def ceremony_saved(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    if created:
        # After the commit: the approver must find the ceremony when the e-mail arrives. Robust:
        # a failure to tell anyone is logged, and never undoes or breaks the held call.
        pk = instance.pk
        transaction.on_commit(lambda: notify.announce(pk), robust=True)
    elif instance.status != Ceremony.Status.PENDING and settings.PASSKEY_MODE == "localhost":
        loopback.page_done(instance.token)  # only localhost mode serves loopback pages
