"""Sends jobs to a pgmq queue with pgmq's own Python client (PyPI `pgmq`), as a team's
producer does: JSON messages, with headers. Job i carries the header `job-id` (`j-I`, the
handler's idempotency key) and, as the `command` header, what the fixture handler does: add
one to the counters `total` and `dI%4` and send its fencing token to SINK. Every tenth job goes
twice (two messages, one key), as a producer that retries a send does.

    python pgmq_producer.py DSN QUEUE SINK START END
"""

import sys

from pgmq import PGMQueue


def main():
    dsn, queue, sink, start, end = sys.argv[1:6]
    client = PGMQueue(conn_string=dsn, init_extension=False, pool_size=1)
    client.create_queue(sink)
    messages, headers = [], []
    for i in range(int(start), int(end)):
        command = f"kv-incr:counts:total;kv-incr:counts:d{i % 4};send-fence:{sink}"
        for _ in range(2 if i % 10 == 0 else 1):
            messages.append({"job": i})
            headers.append({"job-id": f"j-{i}", "command": command})
    for k in range(0, len(messages), 100):
        client.send_batch(queue, messages[k : k + 100], headers=headers[k : k + 100])
    print(len(messages))


if __name__ == "__main__":
    main()
