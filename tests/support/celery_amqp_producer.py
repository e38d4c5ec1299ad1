"""A Celery producer on RabbitMQ, unchanged from how a Celery shop sends tasks: Celery's own app
on kombu's AMQP transport (py-amqp), which declares the queue as Celery does. It sends one task
per case the RabbitMQ Celery test covers and prints their ids as JSON, by case.

usage: celery_amqp_producer.py AMQP_URL QUEUE SINK
"""
import json
import sys

from celery import Celery

url, queue, sink = sys.argv[1], sys.argv[2], sys.argv[3]
app = Celery("proj", broker=url.replace("amqp://", "pyamqp://", 1))
app.conf.task_default_queue = queue

echo = f"echo:{sink}"
ids = {}
ids["plain"] = app.send_task("proj.tasks.echo", args=[echo, 1], kwargs={"month": "2026-12"}).id
# The same task sent again under its id, as a retried publish does.
app.send_task("proj.tasks.echo", args=[echo, 1], kwargs={"month": "2026-12"}, task_id=ids["plain"])
ids["countdown"] = app.send_task("proj.tasks.echo", args=[echo, 2], countdown=3).id
ids["msgpack"] = app.send_task("proj.tasks.echo", args=[echo, 3], serializer="msgpack").id
ids["zlib"] = app.send_task("proj.tasks.echo", args=[echo, 4], compression="zlib").id
ids["time_limited"] = app.send_task(
    "proj.tasks.echo", args=[f"sleep:5000;{echo}"], time_limit=1, soft_time_limit=0.5
).id
ids["pickle"] = app.send_task("proj.tasks.echo", args=[echo, 6], serializer="pickle").id
ids["unknown"] = app.send_task("proj.tasks.nobody_routes_this", args=[echo]).id
# The exchange Celery declared beside the queue is the test's to remove; the queue stays for
# qhost to consume (the test deletes it after).
with app.connection_for_write() as conn:
    conn.default_channel.exchange_delete(queue)
print(json.dumps(ids))
