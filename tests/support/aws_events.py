"""Sends what AWS's own services send to SQS, through an SQS-compatible server (moto): an SNS
topic's notifications, an S3 bucket's event notifications, an EventBridge rule's events. Each
command sets the service up with boto3 as a user would, makes it deliver to the queues it is
given, and prints as JSON the bodies its *tap* queue (a second subscriber or target) received,
so a test can re-send one exactly as the service would when it retries a delivery.

    python aws_events.py sns ENDPOINT QUEUE_ARN TAP_URL TAP_ARN SINK
    python aws_events.py s3 ENDPOINT TAP_URL TAP_ARN SINK
    python aws_events.py eventbridge ENDPOINT QUEUE_ARN TAP_URL TAP_ARN SINK

SINK is the queue the fixture plugin reports to; every message commands `report:SINK`.
"""
import json
import sys
import time
import uuid

import boto3


def client(service, endpoint):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1")


def tapped(sqs, url, n):
    """The bodies of the first `n` messages on the tap queue, in the order they came."""
    bodies, deadline = [], time.time() + 30
    while len(bodies) < n and time.time() < deadline:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for m in got.get("Messages", []):
            bodies.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    if len(bodies) < n:
        sys.exit(f"the tap queue got {len(bodies)} of {n} messages")
    return bodies


def sns(endpoint, queue_arn, tap_url, tap_arn, sink):
    """Topic `orders` (routed) and `refunds` (not), each subscribed by the queue; `orders` by
    the tap too. Publishes one message to each, with message attributes of each type."""
    topics = client("sns", endpoint)
    tag = uuid.uuid4().hex[:8]
    orders = topics.create_topic(Name=f"orders-{tag}")["TopicArn"]
    refunds = topics.create_topic(Name=f"refunds-{tag}")["TopicArn"]
    for topic, arns in ((orders, (queue_arn, tap_arn)), (refunds, (queue_arn,))):
        for arn in arns:
            topics.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    attributes = {
        "command": {"DataType": "String", "StringValue": f"report:{sink}"},
        "tenant": {"DataType": "String", "StringValue": "acme"},
        "amount": {"DataType": "Number", "StringValue": "12.5"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\x02"},
    }
    topics.publish(TopicArn=orders, Message='{"order": 7}', Subject="placed",
                   MessageAttributes=attributes)
    topics.publish(TopicArn=refunds, Message='{"refund": 1}', MessageAttributes=attributes)
    return {"topic": orders.rsplit(":", 1)[1], "tap": tapped(client("sqs", endpoint), tap_url, 1)}


def s3(endpoint, tap_url, tap_arn, sink):
    """A bucket notifying the tap of every created object; three objects whose keys are the
    fixture's commands (the second asks for one retry), then a copy of the first."""
    buckets = client("s3", endpoint)
    bucket = f"uploads-{uuid.uuid4().hex[:8]}"
    buckets.create_bucket(Bucket=bucket)
    buckets.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={"QueueConfigurations": [{
            "QueueArn": tap_arn,
            "Events": ["s3:ObjectCreated:*"],
        }]},
    )
    keys = [f"report:{sink}", f"flaky:2;report:{sink}", f"log:third one;report:{sink}"]
    for key in keys:
        buckets.put_object(Bucket=bucket, Key=key, Body=b"abc")
    buckets.copy_object(Bucket=bucket, Key="a-copy", CopySource={"Bucket": bucket, "Key": keys[0]})
    # The test event, the three puts, the copy.
    return {"bucket": bucket, "keys": keys, "tap": tapped(client("sqs", endpoint), tap_url, 5)}


def eventbridge(endpoint, queue_arn, tap_url, tap_arn, sink):
    """A rule on the default bus matching the orders source, targeting the queue and the tap;
    an `Order Placed` event (routed) and an `Order Shipped` one (not)."""
    events = client("events", endpoint)
    rule = f"orders-{uuid.uuid4().hex[:8]}"
    events.put_rule(Name=rule, EventPattern=json.dumps({"source": ["com.example.orders"]}))
    events.put_targets(Rule=rule, Targets=[{"Id": "queue", "Arn": queue_arn},
                                           {"Id": "tap", "Arn": tap_arn}])
    detail = json.dumps({"command": f"report:{sink}", "order": 7})
    events.put_events(Entries=[
        {"Source": "com.example.orders", "DetailType": "Order Placed", "Detail": detail,
         "Resources": ["arn:aws:example:us-east-1:123456789012:order/7"]},
        {"Source": "com.example.orders", "DetailType": "Order Shipped", "Detail": detail},
    ])
    return {"tap": tapped(client("sqs", endpoint), tap_url, 2)}


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    print(json.dumps({"sns": sns, "s3": s3, "eventbridge": eventbridge}[command](*args)))
