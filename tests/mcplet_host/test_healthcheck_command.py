"""`manage.py healthcheck`: docker compose's health check of the services without HTTP."""

import socket

import pytest
from django.core.management import call_command

from mcplet_host.celery import app
from mcplets.restaurant.__main__ import check
from tests.mcplet_host.test_healthz import UNREACHABLE_REDIS

pytestmark = pytest.mark.django_db


def test_up(capsys):
    call_command("healthcheck")
    assert capsys.readouterr().out.strip() == "up"


def test_a_part_down_exits_1_naming_it(capsys):
    saved = app.conf.broker_url
    app.conf.broker_url = UNREACHABLE_REDIS
    try:
        with pytest.raises(SystemExit) as exit:
            call_command("healthcheck")
    finally:
        app.conf.broker_url = saved
    assert exit.value.code == 1
    assert capsys.readouterr().err.startswith("broker down: ")


def test_the_mcplets_check_needs_every_port_listening():
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        assert check([listening.getsockname()[1]]) == 0
        assert check([listening.getsockname()[1], closed.getsockname()[1]]) == 1
