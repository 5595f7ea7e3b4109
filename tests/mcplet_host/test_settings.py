"""A bad environment stops the host at start-up with a message naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start_django(**env):
    environment = {
        **os.environ,
        "SECRET_KEY": "test",
        "DJANGO_SETTINGS_MODULE": "mcplet_host.settings",
    }
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_valid_environment_starts():
    assert start_django().returncode == 0


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("SECRET_KEY", "", "SECRET_KEY is not set"),
        ("DATABASE_URL", "nosuchdb://x/y", "DATABASE_URL="),
        ("REDIS_URL", "http://127.0.0.1:6379", "REDIS_URL="),
        ("PASSKEY_MODE", "bluetooth", "PASSKEY_MODE='bluetooth' is not one of: https, localhost"),
        ("PASSKEY_ORIGIN", "http://example.org", "does not match PASSKEY_RP_ID"),
        ("EMAIL_PORT", "twenty-five", "EMAIL_PORT='twenty-five' is not an integer"),
        ("DEBUG", "maybe", "DEBUG='maybe' is not a boolean"),
    ],
)
def test_a_bad_value_names_the_variable(variable, value, says):
    result = start_django(**{variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert says in result.stderr


def test_https_mode_needs_an_https_origin():
    result = start_django(
        PASSKEY_MODE="https", PASSKEY_RP_ID="host.example", PASSKEY_ORIGIN="http://host.example"
    )
    assert "PASSKEY_ORIGIN='http://host.example' must be an https:// origin" in result.stderr


def test_https_mode_takes_http_localhost_a_secure_context():
    """What docker compose uses by default: the host's own page at http://localhost:8000."""
    result = start_django(
        PASSKEY_MODE="https", PASSKEY_RP_ID="localhost", PASSKEY_ORIGIN="http://localhost:8000"
    )
    assert result.returncode == 0, result.stderr
