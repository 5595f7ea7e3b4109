"""Pool escape: a tool of a pool the caller does not hold — directly, for a partner, through a
pool deleted, renamed or never created, and in a held call resumed after the pool went away."""

import pytest

from held import lifecycle
from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.authority import Authority
from pools.models import Pool

pytestmark = pytest.mark.django_db

POOL_TOOLS = [  # (tool, its pool, arguments, surface)
    ("fetch_web_content", "info-pool", {"url": "https://weather.example/"}, "model"),
    ("read_site_stats", "media-pool", {}, "model"),
    ("send_email", "media-pool", {"to": ["a@example.org"], "body": "hi"}, "app"),
]
APPROVER_ASSERTION = {"type": "passkey_assertion", "signature": "c2ln"}


def test_ungranted_pools(world, attempts):
    holders = {"info-pool": {"info"}, "media-pool": {"dispatch"}}
    for tool, pool, arguments, surface in POOL_TOOLS:
        for caller in ("info", "planning", "dispatch"):
            if caller in holders[pool]:
                continue
            agent = getattr(world, caller)
            with attempts.refused(f"{caller} calls {tool}", details__rule="pool"):
                outcome = gateway.call_tool(agent, tool, arguments, surface)
                assert outcome.status == "refused"
            assert tool not in {t.name for t in gateway.tools_for(agent)}


def test_a_partner_outside_its_grants(world, attempts):
    """The partner holds info-pool only: the dispatch agent's media-pool is out of reach, and
    with no grants at all even the info agent's pool is."""
    for tool, _, arguments, surface in POOL_TOOLS[1:]:
        with attempts.refused(f"partner via dispatch: {tool}", details__partner="partner-bot"):
            outcome = gateway.call_tool(
                world.dispatch,
                tool,
                arguments,
                surface,
                authority=Authority.of_partner(world.partner.agent_id),
            )
            assert outcome.status == "refused"
    world.partner.accessible_pools.clear()
    tool, _, arguments, surface = POOL_TOOLS[0]
    with attempts.refused("partner without grants via info", details__rule="pool"):
        outcome = gateway.call_tool(
            world.info,
            tool,
            arguments,
            surface,
            authority=Authority.of_partner(world.partner.agent_id),
        )
        assert outcome.status == "refused"


@pytest.mark.parametrize("change", ["deleted", "renamed"])
def test_a_pool_that_no_longer_exists(world, attempts, change):
    media = Pool.objects.get(name="media-pool")
    if change == "deleted":
        media.delete()
    else:
        media.name = "media-pool-2"
        media.save()
    for caller in ("info", "planning", "dispatch"):
        agent = getattr(world, caller)
        assert "read_site_stats" not in {t.name for t in gateway.tools_for(agent)}
        with attempts.refused(
            f"{caller}: read_site_stats, pool {change}", details__rule="routable"
        ):
            assert gateway.call_tool(agent, "read_site_stats", {}).status == "refused"
        with attempts.refused(f"{caller}: send_email, pool {change}", details__rule="routable"):
            outcome = gateway.call_tool(agent, "send_email", POOL_TOOLS[2][2], "app")
            assert outcome.status == "refused" and not Ceremony.objects.exists()


def test_a_pool_never_created(world, attempts):
    for caller in ("info", "planning", "dispatch"):
        with attempts.refused(f"{caller}: a tool of ghost-pool", details__rule="routable"):
            outcome = gateway.call_tool(getattr(world, caller), "ghost_pool_read", {})
            assert outcome.envelope["error"]["code"] == "NOT_FOUND"


def test_a_held_call_whose_pool_went_away(world, attempts, admin_user):
    for change in ("deleted", "renamed", "grant revoked"):
        outcome = gateway.call_tool(world.dispatch, "send_email", POOL_TOOLS[2][2], "app")
        held = outcome.ceremony
        held.approve(admin_user, assertion=APPROVER_ASSERTION)
        media = Pool.objects.get(name="media-pool")
        with attempts.refused(
            f"resume after the pool was {change}", details__ceremony=held.token[:8]
        ):
            if change == "deleted":
                media.delete()
            elif change == "renamed":
                Pool.objects.filter(pk=media.pk).update(name="elsewhere")
            else:
                world.dispatch.accessible_pools.remove(media)
            lifecycle.resume(held.pk)
            held.refresh_from_db()
            assert held.status == Ceremony.Status.FAILED
        # Back as it was, for the next round.
        Pool.objects.filter(name="elsewhere").update(name="media-pool")
        restored, _ = Pool.objects.get_or_create(name="media-pool")
        world.dispatch.accessible_pools.add(restored)


def test_the_harness_sees_an_execution(world, mcp):
    """Control: a granted call does reach the server's log (so an empty log means something)."""
    before = len(mcp.calls())
    assert gateway.call_tool(world.dispatch, "read_site_stats", {}).status == "executed"
    assert [c["name"] for c in mcp.calls()[before:]] == ["read_site_stats"]
