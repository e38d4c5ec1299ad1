"""The Python peer of the RabbitMQ bench: the worker a team writes today with kombu (Celery's
messaging library, on py-amqp) and redis-py, in the seed's shape. Consume with manual acks and
a prefetch, and for each message take a lease with Redis `SET NX` on its message id, run the
(trivial) handler when the lease is new, mark the key done, and ack.

Usage: rabbit_python_worker.py AMQP_URL QUEUE REDIS_URL DELIVERIES KEY_PREFIX PREFETCH

It consumes DELIVERIES messages and prints one JSON line: the CPU it used in the consuming loop
(user and system seconds, from `os.times`, so interpreter start-up and imports are left out),
its wall time there, and handled and duplicate counts.
"""

import json
import os
import sys
import time

import redis
from kombu import Connection, Consumer, Queue


def handle(body):
    """The trivial handler: the bench's plugin acks a body of `ack`."""
    return body == b"ack"


def main():
    url, queue, redis_url, deliveries, prefix, prefetch = sys.argv[1:7]
    deliveries, prefetch = int(deliveries), int(prefetch)
    store = redis.Redis.from_url(redis_url)
    store.ping()
    counts = {"seen": 0, "handled": 0, "duplicates": 0}

    def on_message(body, message):
        key = f"{prefix}:{message.properties.get('message_id')}"
        if store.set(key, "leased", nx=True, ex=300):
            if not handle(message.body):
                raise SystemExit(f"the handler refused {message.body!r}")
            store.set(key, "done", ex=86400)
            counts["handled"] += 1
        else:
            counts["duplicates"] += 1
        message.ack()
        counts["seen"] += 1

    with Connection(url.replace("amqp://", "pyamqp://", 1)) as conn:
        consumer = Consumer(
            conn.channel(),
            queues=[Queue(queue, no_declare=True)],
            callbacks=[on_message],
            prefetch_count=prefetch,
        )
        with consumer:
            start, wall = os.times(), time.monotonic()
            while counts["seen"] < deliveries:
                conn.drain_events(timeout=30)
            end, wall = os.times(), time.monotonic() - wall
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
    main()
