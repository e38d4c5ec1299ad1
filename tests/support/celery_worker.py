"""A Celery worker, as a team keeps one for the tasks not moved to qhost yet: Celery on kombu's
SQS transport (which polls with pycurl) running `proj.tasks.record`, which appends what it is
given to a file. The test points it at its server, queue and file through the environment.

usage: python -m celery -A celery_worker worker -Q QUEUE --pool=solo
"""
import os
from urllib.parse import urlparse

from celery import Celery

where = urlparse(os.environ["QHOST_E2E_SQS"])
app = Celery("proj", broker=f"sqs://test:test@{where.hostname}:{where.port}")
app.conf.broker_transport_options = {
    "region": "us-east-1",
    "is_secure": False,
    "wait_time_seconds": 1,
    "polling_interval": 0.2,
}
app.conf.task_default_queue = os.environ["QHOST_E2E_QUEUE"]


@app.task(name="proj.tasks.record")
def record(text, n=0):
    with open(os.environ["QHOST_E2E_OUT"], "a") as out:
        out.write(f"{record.request.id} {text} {n}\n")
