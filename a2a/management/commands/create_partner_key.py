from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from a2a.models import PartnerKey
from agents.models import Agent


class Command(BaseCommand):
    help = "Create an API key for a partner (an external agent) and print it once."

    def add_arguments(self, parser):
        parser.add_argument("agent_id")
        parser.add_argument("--name", default="default", help="what the key is for")
        parser.add_argument("--days", type=int, default=None, help="expire after this many days")

    def handle(self, *args, agent_id, name, days, **options):
        partner = Agent.objects.filter(agent_id=agent_id, kind=Agent.Kind.EXTERNAL).first()
        if partner is None:
            raise CommandError(f"No partner (external agent) with agent_id {agent_id!r}.")
        expires = timezone.now() + timedelta(days=days) if days else None
        key, raw = PartnerKey.issue(partner, name, expires)
        self.stderr.write(f"Key {key.prefix}… for {agent_id}: copy it now, it is not stored.")
        self.stdout.write(raw)
