"""The Python peer of the pgmq bench: the worker a team writes today with pgmq's own client
(PyPI `pgmq`, on psycopg). Read a batch with a visibility timeout; for each message insert its
id into a table with a unique constraint (the dedup), run the (trivial) handler when the insert
took, and delete the message.

Usage: pgmq_python_worker.py DSN QUEUE DELIVERIES BATCH

It consumes DELIVERIES messages and prints one JSON line: the CPU it used in its loop (user and
system seconds, from `os.times`, so interpreter start-up and imports are left out), its wall
time there, and handled and duplicate counts.
"""

import json
import os
import sys
import time

from pgmq import PGMQueue


def handle(message):
    """The trivial handler: the bench's plugin acks every message."""
    return message is not None


def main():
    dsn, queue, deliveries, batch = sys.argv[1:5]
    deliveries, batch = int(deliveries), int(batch)
    client = PGMQueue(conn_string=dsn, init_extension=False, pool_size=1)
    with client.pool.connection() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_dedup (id text PRIMARY KEY)")
    counts = {"seen": 0, "handled": 0, "duplicates": 0}
    start, wall = os.times(), time.monotonic()
    while counts["seen"] < deliveries:
        messages = client.read_batch(queue, vt=30, batch_size=batch)
        for m in messages:
            with client.pool.connection() as conn:
                took = conn.execute(
                    "INSERT INTO bench_dedup (id) VALUES (%s) ON CONFLICT DO NOTHING",
                    (f"{queue}:{m.msg_id}",),
                ).rowcount
            if took:
                if not handle(m.message):
                    raise SystemExit(f"the handler refused {m.message!r}")
                counts["handled"] += 1
            else:
                counts["duplicates"] += 1
            client.delete(queue, m.msg_id)
            counts["seen"] += 1
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
