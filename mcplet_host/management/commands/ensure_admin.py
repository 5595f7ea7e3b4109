import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create an 'admin' superuser when none exists, and print its password once."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--email", default="admin@localhost")

    def handle(self, *args, username, email, **options):
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            self.stdout.write(
                "An administrator account already exists (reset it with changepassword)."
            )
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email=email, password=password)
        self.stdout.write(
            self.style.SUCCESS("Created the administrator account — shown only this once:")
        )
        self.stdout.write(f"  username: {username}\n  password: {password}")
