"""The Python peer of the JetStream bench: the worker a team writes today with NATS's own
client (PyPI `nats-py`). Fetch a batch from a durable pull consumer; for each message `SET NX`
its id in Redis (the dedup, with a day's expiry), run the (trivial) handler when the set took,
and ack the message.

Usage: nats_python_worker.py URL STREAM DELIVERIES BATCH REDIS_URL

It consumes DELIVERIES messages and prints one JSON line: the CPU it used in its loop (user and
system seconds, from `os.times`, so interpreter start-up and imports are left out), its wall
time there, and handled and duplicate counts.
"""

import asyncio
import json
import os
import sys
import time

import nats
import redis


def handle(message):
    """The trivial handler: the bench's plugin acks every message."""
    return message is not None


async def main():
    url, stream, deliveries, batch, redis_url = sys.argv[1:6]
    deliveries, batch = int(deliveries), int(batch)
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe(stream, durable="pyworker", stream=stream)
    store = redis.Redis.from_url(redis_url)
    counts = {"seen": 0, "handled": 0, "duplicates": 0}
    start, wall = os.times(), time.monotonic()
    while counts["seen"] < deliveries:
        try:
            messages = await sub.fetch(batch, timeout=5)
        except nats.errors.TimeoutError:
            continue
        for m in messages:
            key = f"pyworker:{stream}:{m.metadata.sequence.stream}"
            if store.set(key, 1, nx=True, ex=86400):
                if not handle(m.data):
                    raise SystemExit(f"the handler refused {m.data!r}")
                counts["handled"] += 1
            else:
                counts["duplicates"] += 1
            await m.ack()
            counts["seen"] += 1
    end, wall = os.times(), time.monotonic() - wall
    await nc.close()
    print(
        json.dumps(
            {
                "user": end.user - start.user,
                "system": end.system - start.system,
                "wall": wall,
                **counts,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
