import sys

from django.core.management.base import BaseCommand

from mcplet_host import health


class Command(BaseCommand):
    help = (
        "The /healthz probes (database, broker, cache) from this process's environment; exits 1 "
        "when one is down (docker compose's health check of the services without HTTP)."
    )

    def handle(self, *args, **options):
        down = {name: error for name, probe in health.CHECKS.items() if (error := probe())}
        for name, error in down.items():
            self.stderr.write(f"{name} down: {error}")
        if down:
            sys.exit(1)
        self.stdout.write("up")
