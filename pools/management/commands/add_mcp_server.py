import shlex

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from pools.mcp_client import ServerConfig, ServerUnreachable, command_problem, probe
from pools.models import McpServer

NOT_UP_YET = "If it is not up yet, register it anyway with --no-check."


class Command(BaseCommand):
    help = (
        "Register an MCP server (stdio command or streamable HTTP URL), after checking that it "
        "answers MCP (server/discover, or the initialize handshake of older revisions); nothing is "
        "registered when it does not, unless --no-check."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        transport = parser.add_mutually_exclusive_group(required=True)
        transport.add_argument("--stdio", metavar='"COMMAND ARGS..."', help="launched by the host")
        transport.add_argument("--url", help="a streamable HTTP endpoint")
        parser.add_argument("--header", action="append", default=[], metavar="'NAME: value'")
        parser.add_argument("--env", action="append", default=[], metavar="NAME=value")
        parser.add_argument("--disabled", action="store_true")
        parser.add_argument(
            "--no-check",
            action="store_false",
            dest="check",
            help="register without starting or calling the server (it is not up yet)",
        )
        parser.add_argument(
            "--timeout", type=float, default=10.0, help="seconds the check waits (default 10)"
        )

    def handle(self, *args, name, stdio, url, header, env, disabled, check, timeout, **options):
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
        if check:
            server.protocol_version = self._check(server, timeout)
        server.save()
        checked = f", which answers MCP {server.protocol_version}" if check else ", not checked"
        self.stdout.write(
            self.style.SUCCESS(
                f"Registered {name} ({server.transport}: {server.endpoint}{checked})."
            )
        )
        self.stdout.write(f"Discover its MCPlets with: python manage.py discover_mcplets {name}")

    def _check(self, server, timeout):
        if server.transport == McpServer.Transport.STDIO and (
            problem := command_problem(server.command)
        ):
            raise CommandError(f"{server.name}: {problem}. Nothing was registered. {NOT_UP_YET}")
        try:
            return probe(ServerConfig.of(server), timeout=timeout)
        except ServerUnreachable as exc:
            raise CommandError(
                f"{exc}\nNothing was registered: it does not answer MCP. {NOT_UP_YET}"
            ) from None


def _pairs(items, separator, option):
    pairs = {}
    for item in items:
        key, sep, value = item.partition(separator)
        if not sep or not key.strip():
            raise CommandError(f"{option} {item!r}: write NAME{separator}value.")
        pairs[key.strip()] = value.strip()
    return pairs
