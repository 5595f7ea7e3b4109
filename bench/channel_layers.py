"""The dashboard's live message through each channels-redis layer: CPU and wall time of one
`group_send`, the sorted-set layer (`channels_redis.core`) beside the pub/sub one
(`channels_redis.pubsub`, the host's), taken in turn.

    REDIS_URL=redis://127.0.0.1:6379/0 SECRET_KEY=bench .venv/bin/python bench/channel_layers.py \\
        [--sends 3000] [--rounds 3]

Each layer sends to a group no socket listens to, on a prefix of its own, as a host does when no
dashboard is open; what a listening socket adds is the same on both. The message is one audit
event's payload (`dashboard.receivers.audit_payload`'s shape). Nothing is asserted.
"""

import argparse
import asyncio
import os
import sys
import time

from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

EVENT = {"seq": 1, "eventType": "TOOL_EXECUTED", "traceId": "0" * 36, "result": "SUCCESS"}
MESSAGE = {"type": "dashboard.message", "payloads": [{"type": "audit", "events": [EVENT]}]}
LAYERS = {"sorted-set": RedisChannelLayer, "pub/sub": RedisPubSubChannelLayer}


async def timed(layer, sends):
    """(CPU µs, wall µs) per group_send, after a warm-up."""
    for _ in range(100):
        await layer.group_send("dashboard", MESSAGE)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(sends):
        await layer.group_send("dashboard", MESSAGE)
    return (time.process_time() - cpu) / sends * 1e6, (time.perf_counter() - wall) / sends * 1e6


async def main(args):
    url = os.environ.get("REDIS_URL")
    if not url:
        sys.exit("bench/channel_layers.py: REDIS_URL is not set (e.g. redis://127.0.0.1:6379/0)")
    for round_ in range(1, args.rounds + 1):
        for name, layer in LAYERS.items():
            hosts = [{"address": url}]
            cpu, wall = await timed(layer(hosts=hosts, prefix=f"bench:{os.getpid()}"), args.sends)
            print(f"round {round_}  {name:<10} CPU {cpu:6.1f} µs   wall {wall:6.1f} µs a send")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=3000, help="timed sends per layer per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the layers in turn")
    asyncio.run(main(parser.parse_args()))
