from django.core.management.base import BaseCommand, CommandError

from agents import director
from agents.models import Agent
from mcplet_host.celery import run_here_when_embedded


class Command(BaseCommand):
    help = (
        "Run one cycle of a Director now, under the same lock as its schedule, and say whether "
        "it ran, was skipped (and why) or failed."
    )

    def add_arguments(self, parser):
        parser.add_argument("agent_id")

    def handle(self, *args, agent_id, **options):
        if not Agent.objects.filter(agent_id=agent_id, kind=Agent.Kind.DIRECTOR).exists():
            raise CommandError(f"No Director with agent_id {agent_id!r}.")
        with run_here_when_embedded():
            cycle = director.run_cycle(agent_id)
        if cycle.outcome == "failed":
            raise CommandError(f"The cycle failed: {cycle.reason}")
        self.stdout.write(f"{agent_id}: {cycle}")
