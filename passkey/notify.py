"""Telling approvers that a call waits: an e-mail to each, and in localhost mode the ceremony's
own loopback page, started by the host's web process only (passkey.links) and opened in a
browser when this machine has one (else its URL is logged). Another process — a command, a
separate worker — links to the host's page, which leads on to the loopback page."""

import logging
import smtplib
import threading
import webbrowser

from django.conf import settings
from django.core import mail
from django.template.loader import render_to_string

from held.models import Ceremony
from passkey import links, loopback, models

logger = logging.getLogger(__name__)


def approvers():
    """Approvers who have an e-mail address."""
    return models.approvers().exclude(email="").order_by("pk")


def announce(ceremony_id):
    """Run once a new ceremony is committed: open its page (localhost mode) and e-mail."""
    ceremony = Ceremony.objects.filter(pk=ceremony_id, status=Ceremony.Status.PENDING).first()
    if ceremony is None:
        return
    page = links.ceremony_url(ceremony)
    direct = None
    if settings.PASSKEY_MODE == "localhost":
        crowded = loopback.running() >= loopback.EAGER  # opened from the host's link, if asked
        if links.serves_pages() and not crowded:  # the page lives as long as this process
            try:
                direct = loopback.serve(ceremony).url
            except OSError:
                logger.exception("Could not start the approval page of %s", ceremony)
        shown = direct or page
        if crowded or not open_in_browser(shown):
            logger.info("Approval needed: %s — open %s", ceremony, shown)
    send_notice(ceremony, page, direct)


def send_notice(ceremony, page, direct=None):
    """One e-mail per approver (no one sees the others' addresses); returns how many went."""
    recipients = list(approvers().values_list("email", flat=True))
    if not recipients:
        logger.warning("Nobody can be told that %s waits: no approver has an e-mail", ceremony)
        return 0
    context = {"ceremony": ceremony, "page": page, "direct": direct}
    subject = render_to_string("passkey/notice_subject.txt", context).strip()
    body = render_to_string("passkey/notice_email.txt", context)
    try:
        return mail.send_mass_mail([(subject, body, None, [to]) for to in recipients])
    except (smtplib.SMTPException, OSError):
        logger.exception("Could not e-mail the approvers of %s", ceremony)
        return 0


def open_in_browser(url):
    """Open `url` in this machine's graphical browser, if it has one. Never blocks the caller."""
    wanted = getattr(settings, "PASSKEY_OPEN_BROWSER", None)
    if wanted is None:  # default: yes, except under Django's test runner (it sets mail.outbox)
        wanted = not hasattr(mail, "outbox")
    if not wanted:
        return False
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return False
    if type(browser) is webbrowser.GenericBrowser:
        return False  # a console browser (lynx, w3m) would take over the worker's terminal
    threading.Thread(target=browser.open, args=(url,), daemon=True).start()
    return True
