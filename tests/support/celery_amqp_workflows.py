"""Celery's workflows on RabbitMQ, sent by Celery's own producer (py-amqp) as a Celery shop
sends them: a chain of two tasks, a task with a callback (`link=`), and a chain whose second
step goes to a queue a Celery worker consumes (`proj.tasks.work` on ONWARD), so the task qhost
sends on must be one a Celery worker on RabbitMQ reads. Prints the ids by case.

usage: celery_amqp_workflows.py AMQP_URL QUEUE SINK ONWARD
"""
import json
import sys

from celery import Celery, chain

url, queue, sink, onward = sys.argv[1:5]
app = Celery("proj", broker=url.replace("amqp://", "pyamqp://", 1))
app.conf.task_default_queue = queue


@app.task(name="proj.tasks.echo")
def echo(*args):
    """Run by qhost, never here."""


@app.task(name="proj.tasks.work")
def work(command):
    """Run by the Celery worker on ONWARD, never here."""


say = f"echo:{sink}"
ids = {}
two = chain(echo.si(say, "first"), echo.si(say, "second")).apply_async()
ids["first"], ids["second"] = two.parent.id, two.id
ids["parent"] = echo.apply_async(args=[say, "parent"], link=echo.si(say, "linked")).id
handoff = chain(echo.si(say, "handoff"), work.si("echo:done").set(queue=onward)).apply_async()
ids["handoff"], ids["worker"] = handoff.parent.id, handoff.id
# The exchange Celery declared beside the queue is the test's to remove; the queue stays for
# qhost to consume (the test deletes it after).
with app.connection_for_write() as conn:
    conn.default_channel.exchange_delete(queue)
print(json.dumps(ids))
