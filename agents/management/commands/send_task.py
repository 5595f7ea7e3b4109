import json
import time

from django.core.management.base import BaseCommand, CommandError

from a2a import bus
from a2a.models import A2AMessage
from a2a.schemas import A2AValidationError
from agents.models import Agent, AgentRun
from mcplet_host.celery import run_here_when_embedded
from passkey import links


class Command(BaseCommand):
    help = (
        "Send one A2A task on the local bus and print its task response, or, when the run waits "
        "for a person, where to approve it. In the embedded mode (no REDIS_URL) this process "
        "runs the task itself; otherwise a worker does."
    )

    def add_arguments(self, parser):
        parser.add_argument("--from", dest="sender", required=True, metavar="AGENT")
        parser.add_argument("--to", dest="recipient", required=True, metavar="AGENT")
        parser.add_argument("--params", default="{}", metavar="JSON")
        parser.add_argument("--context", default=None, help="an existing contextId to continue")
        parser.add_argument(
            "--wait", type=float, default=120.0, help="seconds to wait (default 120)"
        )

    def handle(self, *args, sender, recipient, params, context, wait, **options):
        try:
            parameters = json.loads(params)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--params is not JSON: {exc}") from None
        if not Agent.objects.filter(agent_id=sender).exists():
            raise CommandError(f"No agent with agent_id {sender!r}.")
        try:
            with run_here_when_embedded():
                request = bus.send_task(sender, recipient, parameters, context_id=context)
        except (A2AValidationError, TypeError) as exc:
            raise CommandError(f"The task is not a valid A2A request: {exc}") from None
        self.stderr.write(f"Sent task {request.message_id} (context {request.context_id}).")
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            response = A2AMessage.objects.filter(reply_to=request.message_id).first()
            if response is not None:
                self.stdout.write(json.dumps(response.body, indent=2, ensure_ascii=False))
                if response.status not in ("success",):
                    raise CommandError(f"The task ended with status {response.status}.")
                # The workflow may go on after this answer (hand-offs) and wait for a person.
                self.tell_waiting(AgentRun.objects.filter(context_id=request.context_id))
                return
            if self.tell_waiting(AgentRun.objects.filter(request__message_id=request.message_id)):
                return  # answered once a person decides: nothing to wait for here
            time.sleep(0.2)
        raise CommandError(
            f"No response within {wait:g} s; the run may still be working "
            "(see the dashboard or admin › Agent runs)."
        )

    def tell_waiting(self, runs):
        """Say which of `runs` wait for an approval, and where to give it; True if any."""
        waiting = runs.filter(status=AgentRun.Status.AWAITING_APPROVAL, waiting_for__isnull=False)
        waiting = list(waiting.select_related("agent", "waiting_for"))
        for run in waiting:
            ceremony = run.waiting_for
            message = f" ({ceremony.prompt_message})" if ceremony.prompt_message else ""
            self.stdout.write(
                f"{run.agent.agent_id} waits for {links.describe(ceremony)}{message}.\n"
                f"{links.next_step(ceremony)} at {links.ceremony_url(ceremony)}"
            )
        return bool(waiting)
