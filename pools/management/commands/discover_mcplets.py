import json

from django.core.management.base import BaseCommand, CommandError

from pools.discovery import discover
from pools.mcp_client import ServerUnreachable
from pools.models import McpServer

COLUMNS = ["name", "server", "type", "pool", "visibility", "auth", "status", "reason"]


class Command(BaseCommand):
    help = (
        "Discover MCPlets now and print one row per tool. Exit status 0 when every named "
        "server answered (all enabled servers when none is named)."
    )

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="*", metavar="NAME")
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="one JSON object per line"
        )
        parser.add_argument("--timeout", type=float, default=30.0)

    def handle(self, *args, names, as_json, timeout, **options):
        servers = (
            McpServer.objects.filter(name__in=names)
            if names
            else McpServer.objects.filter(enabled=True)
        )
        unknown = set(names) - set(servers.values_list("name", flat=True))
        if unknown:
            raise CommandError(f"No MCP server named {', '.join(sorted(unknown))}.")
        failures = []
        for server in servers:
            try:
                report = discover(server, timeout=timeout)
                self.stderr.write(str(report))
            except ServerUnreachable as exc:
                failures.append(str(exc))
                self.stderr.write(self.style.ERROR(f"{server.name}: unreachable — {exc}"))
        rows = [
            _row(m) for s in servers for m in s.mcplets.select_related("server").order_by("name")
        ]
        self.stdout.write(_as_json(rows) if as_json else _as_table(rows))
        if failures:
            raise CommandError(f"{len(failures)} server(s) did not answer: " + "; ".join(failures))


def _row(mcplet):
    auth = f"{mcplet.auth_required}/{mcplet.auth_enforcement}" if mcplet.auth_required else ""
    return {
        "name": mcplet.name,
        "server": mcplet.server.name,
        "type": mcplet.mcplet_type,
        "pool": mcplet.pool_name,
        "visibility": ",".join(mcplet.visibility),
        "auth": auth,
        "status": mcplet.status,
        "reason": mcplet.rejection_reason,
    }


def _as_json(rows):
    return "\n".join(json.dumps(row) for row in rows)


def _as_table(rows):
    if not rows:
        return "No MCPlets."
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS}

    def line(row):
        return "  ".join(str(row[c]).ljust(widths[c]) for c in COLUMNS).rstrip()

    return "\n".join([line({c: c.upper() for c in COLUMNS}), *map(line, rows)])
