"""The Celery app every Celery test script builds: Celery's own, on kombu's SQS transport,
pointed at the test's SQS-compatible server, sending to (or consuming) one queue."""
from urllib.parse import urlparse

from celery import Celery


def app_for(endpoint, queue, backend=None, **transport):
    """An app whose broker is the SQS-compatible server at `endpoint` and whose default queue
    is `queue`; `backend` is a result backend URL; `transport` adds transport options."""
    where = urlparse(endpoint)
    app = Celery("proj", broker=f"sqs://test:test@{where.hostname}:{where.port}", backend=backend)
    app.conf.broker_transport_options = {"region": "us-east-1", "is_secure": False, **transport}
    app.conf.task_default_queue = queue
    return app
