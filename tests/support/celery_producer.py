"""A Celery producer, unchanged from how a Celery shop sends tasks: Celery's own app on kombu's
SQS transport, pointed at the test's SQS-compatible server. It sends one task per case the
Celery tests cover and prints their ids as JSON, by case.

usage: celery_producer.py ENDPOINT QUEUE SINK
"""
import json
import sys
from datetime import datetime, timezone

import boto3
from celery_app import app_for

endpoint, queue, sink = sys.argv[1], sys.argv[2], sys.argv[3]
app = app_for(endpoint, queue)

echo = f"echo:{sink}"
ids = {}
ids["plain"] = app.send_task("proj.tasks.echo", args=[echo, 1], kwargs={"month": "2026-12"}).id
# A producer that sends a task again under the same id, as a retried publish or a duplicate
# `delay()` in a web request does.
app.send_task("proj.tasks.echo", args=[echo, 1], kwargs={"month": "2026-12"}, task_id=ids["plain"])
ids["countdown"] = app.send_task("proj.tasks.echo", args=[echo, 2], countdown=3).id
ids["msgpack"] = app.send_task("proj.tasks.echo", args=[echo, 3], serializer="msgpack").id
ids["zlib"] = app.send_task("proj.tasks.echo", args=[echo, 4], compression="zlib").id
ids["when"] = app.send_task(
    "proj.tasks.echo", args=[echo, datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)]
).id
ids["expired"] = app.send_task(
    "proj.tasks.echo", args=[echo, 5], expires=datetime(2020, 1, 1, tzinfo=timezone.utc)
).id
# A hard time limit below the plugin's own deadline caps the run.
ids["time_limited"] = app.send_task(
    "proj.tasks.echo", args=[f"sleep:5000;{echo}"], time_limit=1, soft_time_limit=0.5
).id
ids["pickle"] = app.send_task("proj.tasks.echo", args=[echo, 6], serializer="pickle").id
ids["unknown"] = app.send_task("proj.tasks.nobody_routes_this", args=[echo]).id
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")
url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
sqs.send_message(QueueUrl=url, MessageBody="not a celery message")
print(json.dumps(ids))
