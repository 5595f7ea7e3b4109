import asyncio
import signal

from django.core.management.base import BaseCommand

from mcplet_host import metrics
from pools.watcher import Watcher


class Command(BaseCommand):
    help = (
        "Keep a session open to every enabled MCP server and re-discover its MCPlets when it "
        "sends tools/list_changed (the `watcher` process). Picks up servers added, edited or "
        "disabled in admin within --poll seconds."
    )

    def add_arguments(self, parser):
        parser.add_argument("--poll", type=float, default=2.0, help="admin changes (default 2 s)")
        parser.add_argument("--ping", type=float, default=10.0, help="liveness ping (default 10 s)")

    def handle(self, *args, poll, ping, **options):
        metrics.remove_dead_files()  # this host's ended processes' (docs/metrics.md)
        asyncio.run(self._run(Watcher(poll_interval=poll, ping_interval=ping)))

    async def _run(self, watcher):
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        self.stdout.write("Watching MCP servers (Ctrl+C to stop).")
        await watcher.run(stop)
