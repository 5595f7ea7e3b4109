"""The adapter in front of an HTTP upstream behind OAuth (`mcplets.examples.oauth_protected`),
as a confidential client with the client credentials grant, its credentials in its environment:
it publishes and calls the upstream's tool as that client; a wrong secret, or none, ends it with
an error that says what to set; a stdio upstream never sees the credentials."""

import os
import subprocess
import sys

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mcplets.examples.oauth_protected import serve
from mcplets.examples.programmable import SOURCE_ROOT, stdio_params, write_spec
from tests.adapter.conftest import adapter_args, write_config
from tests.conftest import Calls

SECRET = "adapter-secret"
READ = {"mcpletType": "read", "visibility": ["model"]}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """The protected upstream (required scope and all), its calls log, and the config."""
    folder = tmp_path_factory.mktemp("oauth-upstream")
    calls = Calls(folder / "calls.jsonl")
    config = write_config(folder / "adapter.json", {"whoami": READ})
    clients = {"the-adapter": SECRET}
    with serve(
        calls_log=calls.path, clients=clients, scopes="read", required_scope="admin"
    ) as base:
        yield base, calls, config


def credentials(base, client_id="the-adapter", secret=SECRET, **more):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPLET_ADAPTER_")}
    env |= {
        "MCPLET_ADAPTER_CLIENT_ID": client_id,
        "MCPLET_ADAPTER_CLIENT_SECRET": secret,
        "MCPLET_ADAPTER_ISSUER": base,
    }
    return env | more


def adapter(config, base, env):
    """The adapter over stdio in front of `base`'s /mcp."""
    args = ["-m", "mcplets.adapt", str(config), "--url", f"{base}/mcp"]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=SOURCE_ROOT)


def run_adapter(config, base, env):
    """The adapter run to its end (it has nothing to serve); its exit code and stderr."""
    args = [sys.executable, "-m", "mcplets.adapt", str(config), "--url", f"{base}/mcp"]
    finished = subprocess.run(
        args,
        cwd=SOURCE_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return finished.returncode, finished.stderr


@pytest.mark.parametrize("scope", [None, "read admin"])
def test_the_adapter_publishes_and_calls_as_its_client(upstream, scope):
    """With no scope set, the client asks for the advertised one and steps up to `admin`
    when whoami needs it; with both set, it has them from the start."""
    base, calls, config = upstream
    env = credentials(base, **({"MCPLET_ADAPTER_SCOPE": scope} if scope else {}))
    echo = f"scope {scope}"

    async def scenario():
        async with Client(adapter(config, base, env)) as client:
            listed = await client.list_tools()
            return listed, await client.call_tool("whoami", {"echo": echo})

    listed, called = anyio.run(scenario)
    assert [t.name for t in listed.tools] == ["whoami"]
    assert called.structured_content["result"]["result"] == {  # the upstream's, enveloped
        "subject": "the-adapter",
        "clientId": "the-adapter",
        "echo": echo,
    }
    assert {"name": "whoami", "arguments": {"echo": echo}, "subject": "the-adapter"} in calls()


def test_a_wrong_secret_ends_the_adapter_with_what_went_wrong(upstream):
    base, calls, config = upstream
    code, stderr = run_adapter(config, base, credentials(base, secret="not-it"))
    assert code != 0
    assert (
        f"mcplets.adapt: the upstream server {base}/mcp could not be authorized with the "
        "adapter's OAuth client credentials (MCPLET_ADAPTER_CLIENT_ID=the-adapter): Token "
        "exchange failed (401)" in stderr
    )
    assert "invalid_client" in stderr
    assert "not-it" not in stderr  # the secret is not told


def test_another_issuer_gets_no_secret(upstream):
    """The issuer set is the only authorization server the secret goes to."""
    base, _, config = upstream
    env = credentials(base, MCPLET_ADAPTER_ISSUER="http://127.0.0.1:1")
    code, stderr = run_adapter(config, base, env)
    assert code != 0
    assert "could not be authorized" in stderr and "issuer" in stderr


def test_without_credentials_the_adapter_says_which_to_set(upstream):
    base, _, config = upstream
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPLET_ADAPTER_")}
    code, stderr = run_adapter(config, base, env)
    assert code != 0
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"mcplets.adapt: the upstream server {base}/mcp answered HTTP 401")
    assert "it is protected by OAuth" in last
    for variable in ("CLIENT_ID", "CLIENT_SECRET", "ISSUER", "SCOPE"):
        assert f"MCPLET_ADAPTER_{variable}" in last


def test_a_stdio_upstream_never_sees_the_oauth_client(tmp_path):
    spec = write_spec(tmp_path / "upstream.json", [{"name": "lookup", "result": {"ok": True}}])
    command, args = stdio_params(spec)
    seen = tmp_path / "env.txt"
    spy = ["sh", "-c", f'env > {seen}; exec "$0" "$@"', command, *args]
    config = write_config(tmp_path / "adapter.json", {"lookup": READ})
    env = credentials("http://127.0.0.1:1")
    params = StdioServerParameters(
        command=sys.executable, args=adapter_args(config, *spy), env=env, cwd=SOURCE_ROOT
    )

    async def scenario():
        async with Client(params) as client:
            return await client.list_tools()

    assert [t.name for t in anyio.run(scenario).tools] == ["lookup"]
    text = seen.read_text()
    assert "MCPLET_ADAPTER_CLIENT_ID" not in text
    assert SECRET not in text and "MCPLET_ADAPTER_CLIENT_SECRET" not in text


def test_an_expired_token_is_replaced(tmp_path):
    calls = Calls(tmp_path / "calls.jsonl")
    config = write_config(tmp_path / "adapter.json", {"whoami": READ})
    with serve(calls_log=calls.path, clients={"the-adapter": SECRET}, token_ttl=2) as base:

        async def scenario():
            async with Client(adapter(config, base, credentials(base))) as client:
                await client.call_tool("whoami", {"echo": "first"})
                await anyio.sleep(3.2)  # past the server's expiry, a second after the client's
                return await client.call_tool("whoami", {"echo": "second"})

        second = anyio.run(scenario)
    assert second.structured_content["result"]["result"]["subject"] == "the-adapter"
    assert [c["arguments"]["echo"] for c in calls()] == ["first", "second"]
