"""docker-compose.yml's `seed` service with the compose defaults (no .env): the secrets that
docker/entrypoint.sh generates on the first start, then `seed_reference --http` exactly as the
service's command says. With the shared default tokens it once had, seed failed on every `up`."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from passkey.models import BackendToken
from pools.models import McpServer
from tests.restaurant.conftest import seed

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
INTERPOLATION = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")
TOKENS = ("RESTAURANT_MAIL_VERIFY_TOKEN", "RESTAURANT_SNS_VERIFY_TOKEN")


def service(name):
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][name]


def compose_defaults(environment):
    """The service's environment as compose gives it with nothing set by the user (a key
    without a value passes one through from the user's environment: here, none)."""
    return {
        key: INTERPOLATION.sub(lambda m: m.group(2) or "", str(value))
        for key, value in environment.items()
        if value is not None
    }


def container_env(environment, var_dir):
    """What a command in the container sees: the entrypoint run on `environment`."""
    env = {**environment, "MCPLET_VAR_DIR": str(var_dir), "PATH": os.environ["PATH"]}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    result = subprocess.run(
        ["sh", str(ENTRYPOINT), "env", "-0"], env=env, capture_output=True, check=True
    )
    return dict(item.split("=", 1) for item in result.stdout.decode().split("\0") if item)


def test_seed_http_with_the_compose_defaults(monkeypatch, tmp_path):
    seed_service, mcplets_service = service("seed"), service("mcplets")
    defaults = compose_defaults(seed_service["environment"])
    assert defaults["SECRET_KEY"] == "" and all(defaults[name] == "" for name in TOKENS)

    seeded = container_env(defaults, tmp_path)
    servers = container_env(compose_defaults(mcplets_service["environment"]), tmp_path)
    for name in ("SECRET_KEY", *TOKENS):  # generated once, the same in every service
        assert seeded[name] and seeded[name] == servers[name]
    assert seeded[TOKENS[0]][:13] != seeded[TOKENS[1]][:13]  # mcpv_ + the 8-character prefix

    command = seed_service["command"]
    assert command[:3] == ["python", "manage.py", "seed_reference"]
    for name in TOKENS:
        monkeypatch.setenv(name, seeded[name])
    out = seed(*command[3:])
    assert "Reference scenario ready." in out and "mcpv_" not in out
    assert set(McpServer.objects.values_list("url", flat=True)) == {
        f"http://mcplets:{port}/mcp" for port in range(9101, 9109)
    }
    mail = BackendToken.authenticate(servers["RESTAURANT_MAIL_VERIFY_TOKEN"])
    sns = BackendToken.authenticate(servers["RESTAURANT_SNS_VERIFY_TOKEN"])
    assert (mail.server.name, sns.server.name) == ("restaurant-mail", "restaurant-sns")

    again = seed(*command[3:])  # the next `up` runs seed again on the same volumes
    assert "Reference scenario ready." in again and BackendToken.objects.count() == 2


def test_django_reads_the_generated_secrets_where_the_entrypoint_does_not_run(tmp_path):
    """`docker compose exec` and health checks skip the entrypoint: settings read the file."""
    generated = container_env({"SECRET_KEY": ""}, tmp_path)
    env = {**os.environ, "SECRET_KEY": "", "MCPLET_VAR_DIR": str(tmp_path)}
    env["DJANGO_SETTINGS_MODULE"] = "mcplet_host.settings"
    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == generated["SECRET_KEY"]
