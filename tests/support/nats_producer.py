"""Publishes jobs to a JetStream stream with NATS's own Python client (PyPI `nats-py`), as a
team's producer does: bytes with headers, each publish acknowledged by the stream. Job i
carries the header `job-id` (`j-I`, the handler's idempotency key) and, as the `command`
header, what the fixture handler does: add one to the counters `total` and `dI%4` and send its
fencing token to SINK (a stream it makes). Every tenth job goes twice (two messages, one key,
no `Nats-Msg-Id`: the stream keeps both, and qhost runs one), as a producer that retries a
publish does. EXTRA, if given, is a command the handler runs first (`sleep:40`).

    python nats_producer.py URL SUBJECT SINK START END [EXTRA]
"""

import asyncio
import sys

import nats
from nats.js.api import RetentionPolicy, StreamConfig


async def main():
    url, subject, sink, start, end = sys.argv[1:6]
    extra = sys.argv[6] + ";" if len(sys.argv) > 6 else ""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=sink, subjects=[sink], retention=RetentionPolicy.LIMITS))
    sent = 0
    acks = []
    for i in range(int(start), int(end)):
        command = f"{extra}kv-incr:counts:total;kv-incr:counts:d{i % 4};send-fence:{sink}"
        headers = {"job-id": f"j-{i}", "command": command}
        for _ in range(2 if i % 10 == 0 else 1):
            acks.append(js.publish(subject, b'{"job": %d}' % i, headers=headers))
            sent += 1
        if len(acks) >= 100:
            await asyncio.gather(*acks)
            acks = []
    await asyncio.gather(*acks)
    await nc.close()
    print(sent)


if __name__ == "__main__":
    asyncio.run(main())
