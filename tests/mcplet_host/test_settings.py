"""A bad environment stops the host at start-up with a message naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcplet_host.config import redis_db

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
        ("MCPLET_WEB_PROCESSES", "0", "MCPLET_WEB_PROCESSES=0 must be at least 1"),
        ("DB_POOL_MAX_SIZE", "-1", "DB_POOL_MAX_SIZE=-1 must be at least 0"),
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


def setting(name, **env):
    """A setting as a process with this environment (and no origin or port of ours) reads it."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("PASSKEY_ORIGIN", "MCPLET_PORT")}
    result = subprocess.run(
        [sys.executable, "-c", f"from mcplet_host import settings; print(settings.{name})"],
        cwd=ROOT,
        env=inherited | {"SECRET_KEY": "test"} | env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_passkey_origin_follows_the_port_the_host_serves_unless_set():
    assert setting("PASSKEY_ORIGIN") == "http://localhost:8000"
    assert setting("PASSKEY_ORIGIN", MCPLET_PORT="8123") == "http://localhost:8123"
    configured = {"MCPLET_PORT": "8123", "PASSKEY_ORIGIN": "https://localhost"}
    assert setting("PASSKEY_ORIGIN", **configured) == "https://localhost"


def test_an_origin_with_a_bad_port_is_refused():
    result = start_django(PASSKEY_ORIGIN="http://localhost:80000")
    assert "PASSKEY_ORIGIN='http://localhost:80000' is not a valid URL: Port out of range" in (
        result.stderr
    )


def test_localhost_mode_needs_the_localhost_rp_id():
    """§16.3: in localhost mode the page is served on a loopback port per ceremony, whose
    origin (http://localhost:PORT) only matches the rpId `localhost`."""
    result = start_django(
        PASSKEY_MODE="localhost",
        PASSKEY_RP_ID="host.example",
        PASSKEY_ORIGIN="https://host.example",
    )
    assert result.returncode != 0 and "ImproperlyConfigured" in result.stderr
    assert "PASSKEY_RP_ID='host.example' must be 'localhost' when PASSKEY_MODE=localhost" in (
        result.stderr
    )


def test_a_pool_and_kept_connections_are_not_both_asked():
    result = start_django(
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/mcplet_host",
        DB_POOL_MAX_SIZE="4",
        DB_CONN_MAX_AGE="60",
    )
    assert result.returncode != 0
    assert "DB_POOL_MAX_SIZE and DB_CONN_MAX_AGE are two ways to keep connections" in result.stderr


def test_a_pool_on_postgresql_only():
    """SQLite (the embedded host) has no pool: the size is then ignored."""
    pg = {"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/mcplet_host"}
    options = "DATABASES['default'].get('OPTIONS', {}).get('pool')"
    assert setting(options, DB_POOL_MAX_SIZE="4", **pg) == (
        "{'min_size': 1, 'max_size': 4, 'timeout': 10}"
    )
    assert setting(options, **pg) == "None"
    assert setting(options, DB_POOL_MAX_SIZE="4", DATABASE_URL="sqlite:///var/x.sqlite3") == "None"


def test_postgresql_binds_on_the_server_and_prepares_what_repeats():
    pg = {"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/mcplet_host"}
    options = "DATABASES['default'].get('OPTIONS', {})"
    assert setting(options, **pg) == "{'server_side_binding': True, 'prepare_threshold': 5}"
    never = setting(options, DB_PREPARE_THRESHOLD="0", **pg)
    assert never == "{'server_side_binding': True, 'prepare_threshold': None}"
    assert "prepare" not in setting(options, DATABASE_URL="sqlite:///var/x.sqlite3")


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/10",
        "redis://127.0.0.1:6379",
        "redis://127.0.0.1:6379/",
        "redis://:secret@redis:6379/3?db=5",
        "rediss://redis?db=7",
        "redis://redis/2?socket_timeout=5",
    ],
)
def test_the_redis_database_is_read_as_redis_py_reads_it(url):
    """The channel layer's prefix names the database (mcplet_host.config.redis_db), read
    without importing redis-py."""
    from redis.connection import parse_url

    assert int(redis_db(url)) == parse_url(url).get("db", 0)
