"""A Celery producer whose SQS client is the official Amazon SQS Extended Client, as Celery
shops with large task arguments set it up: kombu's own client, given large-payload support,
offloads a message over SQS's threshold to S3 and sends the pointer. It sends one task with a
600 KB argument twice under one id (a duplicate publish), and prints that id.

usage: celery_large.py ENDPOINT QUEUE SINK BUCKET
"""
import sys

import boto3
import sqs_extended_client  # noqa: F401 (gives boto3's SQS clients large-payload support)
from botocore.config import Config
from celery_app import app_for

endpoint, queue, sink, bucket = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
app = app_for(endpoint, queue)
with app.connection_for_write() as connection:
    sqs = connection.default_channel.sqs()
    sqs.s3_client = boto3.client(
        "s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"})
    )
    sqs.large_payload_support = bucket
    large = "x" * 600_000
    first = app.send_task(
        "proj.tasks.echo", args=[f"digest:{sink}", large], connection=connection
    )
    app.send_task(
        "proj.tasks.echo", args=[f"digest:{sink}", large], task_id=first.id,
        connection=connection,
    )
print(first.id)
