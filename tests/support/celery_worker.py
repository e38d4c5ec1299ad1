"""A Celery worker, as a team keeps one for the tasks not moved to qhost yet: Celery on kombu's
SQS transport (which polls with pycurl) running `proj.tasks.record`, which appends what it is
given to a file. The test points it at its server, queue and file through the environment.

usage: python -m celery -A celery_worker worker -Q QUEUE --pool=solo
"""
import os

from celery_app import app_for

app = app_for(
    os.environ["QHOST_E2E_SQS"],
    os.environ["QHOST_E2E_QUEUE"],
    wait_time_seconds=1,
    polling_interval=0.2,
)


@app.task(name="proj.tasks.record")
def record(text, n=0):
    with open(os.environ["QHOST_E2E_OUT"], "a") as out:
        out.write(f"{record.request.id} {text} {n}\n")
