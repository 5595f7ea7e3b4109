from django.core.management.base import BaseCommand, CommandError

from mcplet_host.audit import verify_chain


class Command(BaseCommand):
    help = "Check the audit trail's hash chain; names the first event that was edited or removed."

    def handle(self, *args, **options):
        checked, broken = verify_chain()
        if broken:
            raise CommandError(f"{str(broken).capitalize()} ({checked} events before it verified).")
        self.stdout.write(self.style.SUCCESS(f"Audit chain intact: {checked} events verified."))
