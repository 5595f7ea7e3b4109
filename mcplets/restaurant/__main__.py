"""Run all eight restaurant MCPlets over streamable HTTP (each its own process), optionally
with the backing service — the `mcplets` service of docker compose.

    python -m mcplets.restaurant [--host 0.0.0.0] [--base-port 9101] [--backend]
                                 [--backend-port 5100] [--check]

Server i listens on base-port + i in the order of `mcplets.restaurant.SERVERS` (9101
read_site_stats … 9108 query_hr), at `/mcp`. `RESTAURANT_MAIL_VERIFY_TOKEN` and
`RESTAURANT_SNS_VERIFY_TOKEN` become the `MCPLET_VERIFY_TOKEN` of the e-mail and SNS servers
(each server has its own verify token on the host). `--check` (docker compose's health check)
exits 0 when every server (and with --backend, the backing service) accepts connections.
`--backend-port` defaults to the port of `RESTAURANT_API_URL` (5100 if unset).
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from mcplets.restaurant import SERVERS, STRICT_MODULES, backend

SOURCE_ROOT = Path(__file__).resolve().parents[2]


def child_env(module: str, backend_url: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if backend_url:
        env["RESTAURANT_API_URL"] = backend_url
    if module in STRICT_MODULES:
        token = os.environ.get(f"RESTAURANT_{module.upper()}_VERIFY_TOKEN")
        if token:
            env["MCPLET_VERIFY_TOKEN"] = token
    return env


def check(ports: list[int]) -> int:
    for port in ports:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError as exc:
            print(f"port {port}: {exc}", file=sys.stderr)
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--base-port", type=int, default=SERVERS[0].port)
    parser.add_argument("--backend", action="store_true", help="also run the backing service")
    parser.add_argument("--backend-port", type=int, default=backend.default_port())
    parser.add_argument("--check", action="store_true", help="only check that all listen")
    args = parser.parse_args(argv)
    if args.check:
        ports = [args.base_port + index for index in range(len(SERVERS))]
        return check(ports + [args.backend_port] * args.backend)

    children: list[tuple[str, subprocess.Popen]] = []
    backend_url = None
    if args.backend:
        backend_url = f"http://127.0.0.1:{args.backend_port}"
        command = [sys.executable, "-m", "mcplets.restaurant.backend"]
        command += ["--host", args.host, "--port", str(args.backend_port)]
        children.append(("backend", subprocess.Popen(command, cwd=SOURCE_ROOT)))
    for index, info in enumerate(SERVERS):
        port = args.base_port + index
        command = [sys.executable, "-m", info.dotted, "--transport", "streamable-http"]
        command += ["--host", args.host, "--port", str(port)]
        process = subprocess.Popen(
            command, cwd=SOURCE_ROOT, env=child_env(info.module, backend_url)
        )
        children.append((info.tool, process))
        print(f"{info.tool:18} http://{args.host}:{port}/mcp", file=sys.stderr, flush=True)

    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    while not stopping:
        for name, process in children:
            if process.poll() is not None:
                print(f"{name} exited with {process.returncode}; stopping", file=sys.stderr)
                code, stopping = 1, True
                break
        time.sleep(0.5)
    for _, process in children:
        if process.poll() is None:
            process.terminate()
    for _, process in children:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    return code


if __name__ == "__main__":
    sys.exit(main())
