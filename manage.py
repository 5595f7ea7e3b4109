#!/usr/bin/env python
import argparse
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcplet_host.settings")
    if sys.argv[1:2] == ["runhost"]:
        # Settings load before a command reads its arguments: runhost's --port reaches them as
        # MCPLET_PORT, the address the passkey origin and the verify URL default to.
        parser = argparse.ArgumentParser(prog="manage.py runhost", add_help=False)
        parser.add_argument("--port", type=int)
        port = parser.parse_known_args(sys.argv[2:])[0].port
        if port is not None:
            os.environ["MCPLET_PORT"] = str(port)
    from django.core.management import execute_from_command_line

    from mcplet_host import startup

    startup.begin()
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
