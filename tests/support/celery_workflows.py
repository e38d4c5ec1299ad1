"""Celery's own workflows, sent by its producer as a Celery shop sends them: a chain of two
tasks, a task with a callback (`link=`), a chain whose second step takes the first's return
value (`.s()`), and a chain whose second step is routed to a queue the consuming plugin may not
send tasks to. The task is declared here as the producer's code
declares it, so its signatures are Celery's own (`.si()`, frozen ids). Prints the ids by case.

usage: celery_workflows.py ENDPOINT QUEUE SINK
"""
import json
import sys

from celery import chain
from celery_app import app_for

endpoint, queue, sink = sys.argv[1], sys.argv[2], sys.argv[3]
app = app_for(endpoint, queue)


@app.task(name="proj.tasks.echo")
def echo(*args):
    """Run by qhost, never here."""


say = f"echo:{sink}"
ids = {}
two = chain(echo.si(say, "first"), echo.si(say, "second")).apply_async()
ids["first"], ids["second"] = two.parent.id, two.id
ids["parent"] = echo.apply_async(args=[say, "parent"], link=echo.si(say, "linked")).id
# The first returns the command the second then runs (the fixture's `result:JSON`), given to
# it first in its arguments as Celery gives a parent's return value.
valued = chain(echo.si(f'result:"{say}";{say}', "returns"), echo.s("given")).apply_async()
ids["returns"], ids["given"] = valued.parent.id, valued.id
away = chain(echo.si(say, "before"), echo.si(say, "after").set(queue="proj.elsewhere"))
ids["before"] = away.apply_async().parent.id
print(json.dumps(ids))
