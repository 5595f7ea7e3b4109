import logging
import smtplib
import time
import webbrowser

import pytest
from django.contrib.auth.models import Group, Permission
from django.core import mail

from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.authority import Authority
from passkey import links, loopback, notify
from tests.passkey.conftest import ORIGIN, hold_email, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(django_user_model, approver):
    perm = Permission.objects.get(codename="approve_ceremony")
    django_user_model.objects.create_superuser("boss", "boss@example.org", "pw")
    group = Group.objects.create(name="managers")
    group.permissions.add(perm)
    django_user_model.objects.create_user("vice", "vice@example.org", "pw").groups.add(group)
    gone = django_user_model.objects.create_user("gone", "gone@example.org", "pw", is_active=False)
    gone.user_permissions.add(perm)
    django_user_model.objects.create_user("nomail", "", "pw").user_permissions.add(perm)
    django_user_model.objects.create_user("cook", "cook@example.org", "pw")


def test_every_approver_gets_an_email_with_the_link(held, people, mailoutbox):
    notify.announce(held.pk)
    assert sorted(m.to[0] for m in mailoutbox) == [
        "boss@example.org",
        "manager@example.org",
        "vice@example.org",
    ]
    assert all(len(m.to) == 1 for m in mailoutbox)  # nobody sees the other approvers
    mail = mailoutbox[0]
    assert mail.subject == "Approval needed: send_email for dispatch-agent"
    assert f"{ORIGIN}{url(held)}" in mail.body
    assert "dispatch-agent" in mail.body and "Approve the e-mail" in mail.body
    assert "Free dessert" not in mail.body  # the arguments are shown after sign-in only


def test_the_email_says_who_proposed_it_and_for_whom(registry, approver, mailoutbox):
    registry["partner"].accessible_pools.add(registry["media-pool"])
    email = {"to": ["sato@example.jp"], "body": "Free dessert tomorrow!"}
    authority = Authority("partner-bot", ("director", "info-gathering-agent"))
    held = gateway.call_tool(
        registry["dispatch"],
        "send_email",
        email,
        "app",
        authority=authority,
        proposed_by_model=True,
    ).ceremony
    notify.announce(held.pk)
    (mail,) = mailoutbox
    assert mail.body.startswith(
        "dispatch-agent's model proposes this; it waits for your approval, on behalf of the "
        "partner agent partner-bot, via director → info-gathering-agent.\n"
    )


def test_a_new_ceremony_is_announced_once_committed(
    registry, approver, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        ceremony = hold_email(registry)
        assert mailoutbox == []
    (mail,) = mailoutbox
    assert url(ceremony) in mail.body


def test_a_decided_ceremony_is_not_announced(held, approver, mailoutbox):
    held.decline(Ceremony.Status.REJECTED, approver)
    notify.announce(held.pk)
    assert mailoutbox == []


def test_a_mail_failure_is_logged_not_raised(held, approver, monkeypatch, caplog):
    def fail(*args, **kwargs):
        raise smtplib.SMTPException("relay down")

    monkeypatch.setattr(notify.mail, "send_mass_mail", fail)
    notify.announce(held.pk)
    assert "Could not e-mail the approvers" in caplog.text


def test_nobody_to_tell_is_a_warning(held, caplog):
    notify.announce(held.pk)
    assert "no approver has an e-mail" in caplog.text


class FakeBrowser(webbrowser.BaseBrowser):
    opened = []

    def open(self, url, new=0, autoraise=True):
        self.opened.append(url)
        return True


def test_localhost_mode_opens_the_ceremonys_own_page(
    held, approver, settings, monkeypatch, host_process
):
    settings.PASSKEY_MODE, settings.PASSKEY_OPEN_BROWSER = "localhost", True
    FakeBrowser.opened = []
    monkeypatch.setattr(notify.webbrowser, "get", FakeBrowser)
    notify.announce(held.pk)
    direct = loopback.live_url(held.token)
    assert direct.startswith("http://localhost:") and direct.endswith(url(held))
    for _ in range(50):
        if FakeBrowser.opened:
            break
        time.sleep(0.05)
    assert FakeBrowser.opened == [direct]
    (notice,) = mail.outbox
    assert direct in notice.body and f"{ORIGIN}{url(held)}" in notice.body


def test_past_the_eager_pages_one_starts_when_opened(
    registry, approver, approver_client, settings, monkeypatch, host_process, mailoutbox
):
    """A partner's flood of held tasks must not start a server, two threads and a browser tab
    for each: past loopback.EAGER pages, a call's page starts when an approver opens it."""
    settings.PASSKEY_MODE, settings.PASSKEY_OPEN_BROWSER = "localhost", True
    settings.PASSKEY_ORIGIN, settings.PASSKEY_RP_ID = "http://localhost:8000", "localhost"
    FakeBrowser.opened = []
    monkeypatch.setattr(notify.webbrowser, "get", FakeBrowser)
    monkeypatch.setattr(loopback, "EAGER", 1)
    first, second = hold_email(registry), hold_email(registry, {"to": ["b@x.jp"], "body": "b"})
    notify.announce(first.pk)
    notify.announce(second.pk)
    assert loopback.live_url(first.token) and loopback.live_url(second.token) is None
    assert loopback.running() == 1
    time.sleep(0.5)  # (a browser is opened on a thread of its own)
    assert FakeBrowser.opened == [loopback.live_url(first.token)]
    host_link = f"http://localhost:8000{url(second)}"
    assert host_link in mailoutbox[-1].body
    approver_client.post(url(second, "open"))  # the approver follows it
    assert loopback.live_url(second.token) and loopback.running() == 2
    loopback.close_all()


def test_without_a_browser_the_url_is_logged(held, settings, monkeypatch, caplog, host_process):
    caplog.set_level(logging.INFO, logger="passkey")
    settings.PASSKEY_MODE, settings.PASSKEY_OPEN_BROWSER = "localhost", True

    def no_browser():
        raise webbrowser.Error("could not locate runnable browser")

    monkeypatch.setattr(notify.webbrowser, "get", no_browser)
    notify.announce(held.pk)
    assert loopback.live_url(held.token) in caplog.text


def test_console_browsers_are_never_started(settings, monkeypatch):
    settings.PASSKEY_OPEN_BROWSER = True
    monkeypatch.setattr(notify.webbrowser, "get", lambda: webbrowser.GenericBrowser("lynx"))
    assert notify.open_in_browser("http://localhost:1/") is False


def test_tests_open_no_browser_unless_asked(settings):
    del settings.PASSKEY_OPEN_BROWSER
    assert notify.open_in_browser("http://localhost:1/") is False


def test_another_process_starts_no_loopback_page_and_links_to_the_hosts(
    held, approver, settings, monkeypatch, mailoutbox
):
    """A command or a separate worker that holds a call: its loopback page would die with it
    (or live in a process nobody reaches), so it leaves the page to the host and links there."""
    settings.PASSKEY_MODE, settings.PASSKEY_OPEN_BROWSER = "localhost", True
    FakeBrowser.opened = []
    monkeypatch.setattr(notify.webbrowser, "get", FakeBrowser)
    notify.announce(held.pk)
    assert loopback.live_url(held.token) is None and not loopback._servers
    host_page = f"{ORIGIN}{url(held)}"
    for _ in range(50):
        if FakeBrowser.opened:
            break
        time.sleep(0.05)
    assert FakeBrowser.opened == [host_page]
    (notice,) = mailoutbox
    assert [line for line in notice.body.splitlines() if held.token in line] == [host_page]
    assert "also open at" not in notice.body


def test_the_email_links_to_the_running_hosts_origin(
    held, approver, settings, mailoutbox, monkeypatch
):
    """The host runs on another port than this process's settings say (make run PORT=8766)."""
    settings.PASSKEY_MODE = "localhost"
    settings.PASSKEY_ORIGIN = "http://localhost:8000"
    links.publish("http://localhost:8766", "http://localhost:8766")
    monkeypatch.setattr(links, "_serving_pages", False)  # published by another process
    notify.announce(held.pk)
    (notice,) = mailoutbox
    assert f"http://localhost:8766{url(held)}" in notice.body
    assert "localhost:8000" not in notice.body
