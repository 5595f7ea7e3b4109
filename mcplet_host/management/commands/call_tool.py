import json

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from mcplet_host import gateway


class Command(BaseCommand):
    help = (
        "Run one MCPlet call through the gateway, as AGENT would, and print the result envelope "
        "(or, for an action, the pending approval). Exit status 1 on a refusal or an error."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", required=True, metavar="AGENT_ID")
        parser.add_argument("--tool", required=True, metavar="NAME")
        parser.add_argument(
            "--args", default="{}", dest="arguments", metavar="JSON", help="the arguments object"
        )
        parser.add_argument("--surface", choices=gateway.SURFACES, default="model")
        parser.add_argument("--trace", default="", help="a trace id (the A2A contextId)")
        parser.add_argument("--json", action="store_true", dest="as_json")

    def handle(self, *args, agent, tool, arguments, surface, trace, as_json, **options):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--args is not JSON: {exc}") from None
        Agent = apps.get_model("agents", "Agent")
        caller = Agent.objects.filter(agent_id=agent).first()
        if caller is None:
            raise CommandError(f"No agent with agent_id {agent!r}.")

        outcome = gateway.call_tool(caller, tool, arguments, surface, trace)
        if outcome.status == "pending":
            ceremony = outcome.ceremony
            url = f"{settings.PASSKEY_ORIGIN}/passkey/ceremonies/{ceremony.token}/"
            pending = {
                "status": "pending",
                "ceremony": ceremony.token,
                "tool": ceremony.tool_name,
                "enforcement": ceremony.enforcement,
                "expiresAt": ceremony.expires_at.isoformat(),
                "approveAt": url,
            }
            self.stdout.write(
                json.dumps(pending)
                if as_json
                else f"{tool} is an action: it waits for approval until "
                f"{ceremony.expires_at:%H:%M:%S} UTC.\nApprove or reject it at {url}"
            )
            return
        self.stdout.write(json.dumps(outcome.envelope, indent=None if as_json else 2))
        if outcome.is_error:
            error = outcome.envelope["error"]
            raise CommandError(f"{error['code']}: {error['message']}")
