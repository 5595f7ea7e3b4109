"""The fault harness's run (tests/faults/harness.py): CHAOS_ITERATIONS iterations (10 here, in
CI; `make chaos` runs 100), each failing one named by its seed. Prints the one-line summary."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from mcplets.examples.programmable import write_spec
from tests.conftest import reference_tools
from tests.faults.harness import Chaos, base_seed, iterations, partner_key, write_script
from tests.passkey.authenticator import SoftAuthenticator

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def chaos(tmp_path, django_user_model):
    approver = django_user_model.objects.create_user("manager", "m@example.org", "pw-approver-1")
    approver.user_permissions.add(Permission.objects.get(codename="approve_ceremony"))
    client = Client()
    client.force_login(approver)
    write_script(tmp_path / "chaos.json")
    spec = write_spec(tmp_path / "tools.json", reference_tools())
    harness = Chaos(tmp_path, None, client.cookies["sessionid"].value, SoftAuthenticator(), spec)
    harness.services["mcp"].start()
    try:
        yield harness
    finally:
        harness.services["mcp"].stop()
        harness.proxy.close()


@pytest.fixture
def reference_server(chaos):
    return {"transport": "http", "url": chaos.mcp_url}


def test_faults_at_random_moments_lose_nothing_and_run_nothing_twice(chaos, registry):
    for agent in (registry["dispatch"], registry["planning"]):
        agent.model = "scripted/chaos"
        agent.save()
    registry["media-pool"].rate_limit_per_minute = 10**6  # every approved e-mail runs
    registry["media-pool"].save()
    partner = registry["partner"]
    partner.callable_agents.set([registry["dispatch"], registry["planning"]])
    partner.accessible_pools.set([registry["media-pool"]])
    chaos.partner = partner_key(partner)
    seed = base_seed()
    with chaos:
        for n in range(iterations()):
            chaos.iteration(seed + n)
    print("\n" + chaos.tally.line())
    tally = chaos.tally
    assert not tally.violations and tally.chain_intact, (
        f"{tally.line()}; failing seeds {tally.failing_seeds} (base seed {seed}): "
        f"lost {tally.lost}, doubles {tally.doubles}, unapproved {tally.unapproved}, "
        f"unanswered {tally.unanswered}, stuck {tally.stuck}, chain {tally.chain_breaks}"
    )
