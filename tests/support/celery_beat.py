"""celery beat as a team runs it beside its workers: Celery's own scheduler, on kombu's SQS
transport, sending `proj.tasks.record("beat")` every second (the seed's monthly reminder,
sped up). The side-by-side schedule test starts two of them, the documented mistake of
running more than one beat, each with its own schedule file as two pods would have.

usage: python -m celery -A celery_beat beat -s SCHEDULE_FILE
"""
import os

from celery_app import app_for

app = app_for(os.environ["QHOST_E2E_SQS"], os.environ["QHOST_E2E_QUEUE"])
app.conf.beat_schedule = {
    "monthly-reminder": {"task": "proj.tasks.record", "schedule": 1.0, "args": ["beat"]},
}
