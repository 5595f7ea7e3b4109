import os
import shlex

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.urls import reverse

from pools.mcp_client import ServerConfig, ServerUnreachable, command_problem, probe
from pools.models import McpServer

NOT_UP_YET = "If it is not up yet, register it anyway with --no-check."
SECRET_VARIABLE = "MCPLET_OAUTH_CLIENT_SECRET"  # noqa: S105 (a variable name)


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
        auth = parser.add_mutually_exclusive_group()
        auth.add_argument(
            "--oauth",
            action="store_true",
            help="it is behind OAuth: an operator connects it in admin (Connect…)",
        )
        auth.add_argument(
            "--client-credentials",
            metavar="CLIENT_ID",
            help="it is behind OAuth, reached with this client and the secret in "
            f"${SECRET_VARIABLE} (never on the command line)",
        )
        parser.add_argument("--issuer", help="client credentials: their authorization server")
        parser.add_argument("--scope", default="", help="OAuth: the scopes to ask for")
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
        auth, credentials = _auth(options)
        if auth == McpServer.Auth.NONE and header:
            auth = McpServer.Auth.HEADERS
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
            auth=auth,
            oauth_scope=options["scope"],
            **credentials,
        )
        try:
            server.full_clean()
        except ValidationError as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            raise CommandError(problems) from None
        # An operator's grant comes after: there is nothing to check it with yet.
        check = check and auth != McpServer.Auth.OAUTH
        if check:
            server.protocol_version = self._check(server, timeout)
        server.save()
        checked = f", which answers MCP {server.protocol_version}" if check else ", not checked"
        if auth == McpServer.Auth.OAUTH:
            where = reverse("admin:pools_mcpserver_oauth_connect", args=[server.pk])
            self.stdout.write(
                self.style.SUCCESS(f"Registered {name} ({server.transport}: {server.endpoint}).")
            )
            from passkey import links  # the running host's origin, as call_tool's links

            self.stdout.write(
                f"It is behind OAuth: connect it in admin, {links.origin()}{where} (this also "
                "discovers its MCPlets)."
            )
            return
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
            # (Its authorization server may be what failed: the error says which.)
            raise CommandError(f"{exc}\nNothing was registered. {NOT_UP_YET}") from None


def _auth(options):
    """The authentication chosen on the command line: (McpServer.auth, its OAuth fields)."""
    if options["oauth"]:
        return McpServer.Auth.OAUTH, {}
    if not options["client_credentials"]:
        return McpServer.Auth.NONE, {}
    secret = os.environ.get(SECRET_VARIABLE, "")
    if not secret:
        raise CommandError(f"--client-credentials: put the client secret in ${SECRET_VARIABLE}.")
    return McpServer.Auth.CLIENT_CREDENTIALS, {
        "oauth_client_id": options["client_credentials"],
        "oauth_client_secret": secret,
        "oauth_issuer": options["issuer"] or "",
    }


def _pairs(items, separator, option):
    pairs = {}
    for item in items:
        key, sep, value = item.partition(separator)
        if not sep or not key.strip():
            raise CommandError(f"{option} {item!r}: write NAME{separator}value.")
        pairs[key.strip()] = value.strip()
    return pairs
