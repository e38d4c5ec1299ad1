"""The Python peer of the SQS client bench: the worker a team writes today with boto3 and
redis-py, in the seed's shape. Receive ten, and for each message take a lease with Redis
`SET NX` on its message id, run the (trivial) handler when the lease is new, mark the key done,
and delete the batch. A duplicate whose key is taken is deleted without running.

Usage: sqs_python_worker.py ENDPOINT QUEUE REDIS_URL DELIVERIES KEY_PREFIX

It consumes DELIVERIES messages and prints one JSON line: the CPU it used in the consuming loop
(user and system seconds, from `os.times`, so interpreter start-up and imports are left out),
handled and duplicate counts, and its requests to SQS and round trips to Redis.
"""

import json
import os
import sys

import boto3
import redis


def handle(body):
    """The trivial handler: the bench's plugin acks a body of `ack`."""
    return body == "ack"


def main():
    endpoint, queue, redis_url, deliveries, prefix = sys.argv[1:6]
    deliveries = int(deliveries)
    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    store = redis.Redis.from_url(redis_url)
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    store.ping()

    start = os.times()
    seen = handled = duplicates = requests = round_trips = 0
    while seen < deliveries:
        got = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        requests += 1
        entries = []
        for i, message in enumerate(got):
            key = f"{prefix}:{message['MessageId']}"
            round_trips += 1
            if store.set(key, "leased", nx=True, ex=300):
                if not handle(message["Body"]):
                    raise SystemExit(f"the handler refused {message['Body']!r}")
                store.set(key, "done", ex=86400)
                round_trips += 1
                handled += 1
            else:
                duplicates += 1
            entries.append({"Id": str(i), "ReceiptHandle": message["ReceiptHandle"]})
        if entries:
            sqs.delete_message_batch(QueueUrl=url, Entries=entries)
            requests += 1
        seen += len(got)
    used = os.times()
    print(
        json.dumps(
            {
                "user": used.user - start.user,
                "system": used.system - start.system,
                "handled": handled,
                "duplicates": duplicates,
                "requests": requests,
                "round_trips": round_trips,
            }
        )
    )


if __name__ == "__main__":
    main()
