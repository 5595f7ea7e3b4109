import shlex

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from pools.models import McpServer


class Command(BaseCommand):
    help = "Register an MCP server (stdio command or streamable HTTP URL)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        transport = parser.add_mutually_exclusive_group(required=True)
        transport.add_argument("--stdio", metavar='"COMMAND ARGS..."', help="launched by the host")
        transport.add_argument("--url", help="a streamable HTTP endpoint")
        parser.add_argument("--header", action="append", default=[], metavar="'NAME: value'")
        parser.add_argument("--env", action="append", default=[], metavar="NAME=value")
        parser.add_argument("--disabled", action="store_true")

    def handle(self, *args, name, stdio, url, header, env, disabled, **options):
        if McpServer.objects.filter(name=name).exists():
            raise CommandError(f"A server named {name!r} already exists.")
        words = shlex.split(stdio) if stdio else []
        if stdio is not None and not words:
            raise CommandError("--stdio needs a command.")
        server = McpServer(
            name=name,
            transport=McpServer.Transport.STDIO if stdio else McpServer.Transport.HTTP,
            command=words[0] if words else "",
            args=words[1:],
            url=url or "",
            headers=_pairs(header, ":", "--header"),
            env=_pairs(env, "=", "--env"),
            enabled=not disabled,
        )
        try:
            server.full_clean()
        except ValidationError as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            raise CommandError(problems) from None
        server.save()
        self.stdout.write(
            self.style.SUCCESS(f"Registered {name} ({server.transport}: {server.endpoint}).")
        )
        self.stdout.write(f"Discover its MCPlets with: python manage.py discover_mcplets {name}")


def _pairs(items, separator, option):
    pairs = {}
    for item in items:
        key, sep, value = item.partition(separator)
        if not sep or not key.strip():
            raise CommandError(f"{option} {item!r}: write NAME{separator}value.")
        pairs[key.strip()] = value.strip()
    return pairs
