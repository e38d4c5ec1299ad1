"""A Celery caller that waits on its tasks' results, as web code calling `.get()` does: it sends
each task through Celery on kombu's SQS transport and waits on Celery's Redis result backend.
The tasks' first argument is the fixture plugin's command (plugins/fixtures).
It prints one JSON line per task: the value `get()` returned, or the exception it raised.

usage: celery_caller.py ENDPOINT QUEUE REDIS_URL
"""
import json
import sys

from celery_app import app_for

endpoint, queue, backend = sys.argv[1], sys.argv[2], sys.argv[3]
app = app_for(endpoint, queue, backend)

CASES = [
    ("acked", ["ack"]),
    ("valued", ['result:{"sent": 2, "to": ["a@example.com"]}']),
    ("unvalued", ["result:sent two"]),  # not JSON: the handler is refused and rejects
    ("rejected", ["reject:no such customer"]),
]
for case, args in CASES:
    result = app.send_task("proj.tasks.echo", args=args)
    try:
        value = result.get(timeout=60)
        print(json.dumps({"case": case, "id": result.id, "value": value, "state": result.state}))
    except Exception as e:  # what Celery re-raises from a FAILURE record
        print(json.dumps({"case": case, "id": result.id, "raised": type(e).__name__,
                          "message": str(e), "state": result.state}))
    sys.stdout.flush()
