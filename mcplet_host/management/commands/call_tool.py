import json
import uuid

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError

from held.models import Ceremony
from mcplet_host import gateway, handoff
from passkey import links


class Command(BaseCommand):
    help = (
        "Run one MCPlet call through the gateway, as AGENT would, and print the result envelope "
        "(or, for a call held for a person, what it waits for and where). The running host runs "
        "it (its worker with REDIS_URL; runhost in the embedded mode), so what the call leads to "
        "never depends on this command's process; with no host running, this process runs it. "
        "Exit status 1 on a refusal or an error."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", required=True, metavar="AGENT_ID")
        parser.add_argument("--tool", required=True, metavar="NAME")
        parser.add_argument(
            "--args", default="{}", dest="arguments", metavar="JSON", help="the arguments object"
        )
        parser.add_argument("--surface", choices=gateway.SURFACES, default="model")
        parser.add_argument(
            "--trace",
            default="",
            help="a trace id (the A2A contextId); by default a new one: the call's audit events "
            "share it, and the traceparent its server gets is derived from it",
        )
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
        if len(trace) > 64:
            raise CommandError("--trace is at most 64 characters.")
        trace = trace or str(uuid.uuid4())  # a call of its own: a workflow of its own

        outcome = self._call(caller, tool, arguments, surface, trace)
        if outcome.status == "pending":
            self._tell_held(outcome.ceremony, as_json)
            return
        self.stdout.write(json.dumps(outcome.envelope, indent=None if as_json else 2))
        if outcome.is_error:
            error = outcome.envelope["error"]
            raise CommandError(f"{error['code']}: {error['message']}")

    def _call(self, caller, tool, arguments, surface, trace):
        """The running host's outcome, or this process's when no host runs."""
        try:
            handed = handoff.call(caller.agent_id, tool, arguments, surface, trace)
        except handoff.HandOffFailed as exc:
            raise CommandError(str(exc)) from None
        if handed is None:
            self.stderr.write(
                "No host is running: this command runs the call itself (a wallet's notification "
                "that a step it asks for is done cannot reach this process once it exits)."
            )
            return gateway.call_tool(caller, tool, arguments, surface, trace)
        if handed.get("envelope") is None and handed.get("ceremony") is None:
            raise CommandError(handed.get("error") or f"The host answered {handed!r}.")
        ceremony = None
        if handed.get("ceremony"):
            ceremony = Ceremony.objects.get(token=handed["ceremony"])
        return gateway.Outcome(handed["status"], handed.get("envelope"), ceremony)

    def _tell_held(self, ceremony, as_json):
        url = links.ceremony_url(ceremony)
        if as_json:
            pending = {
                "status": "pending",
                "ceremony": ceremony.token,
                "kind": ceremony.kind,
                "waitsFor": links.describe(ceremony),
                "tool": ceremony.tool_name,
                "enforcement": ceremony.enforcement,
                "expiresAt": ceremony.expires_at.isoformat(),
                "approveAt": url,
            }
            self.stdout.write(json.dumps(pending))
            return
        then = ""
        if ceremony.rules.sends_again:
            then = " Once it is done, the host sends the same call again, once."
        message = f"\n{ceremony.server_name} says: {ceremony.prompt_message}"
        self.stdout.write(
            f"The call is held for {links.describe(ceremony)}, until "
            f"{ceremony.expires_at:%H:%M:%S} UTC.{then}"
            f"{message if ceremony.prompt_message else ''}\n"
            f"{links.next_step(ceremony)} at {url}"
        )
