"""Celery on RabbitMQ as a team runs it, for the side by side with qhost under SIGKILL: kombu's
AMQP transport, a thread pool of four, and `proj.tasks.work`, whose argument is the fixture
plugin's command language (`sleep:10;echo:SINK;sleep:10`): it sleeps, does its effect (appends
its id to the effects file, as a charge or an email would happen), and sleeps again.

As a worker's app (`python -m celery -A celery_rabbit_worker worker ...`) it reads its broker,
queue, effects file and acknowledgement mode from QHOST_E2E_AMQP, QHOST_E2E_QUEUE,
QHOST_E2E_OUT and QHOST_E2E_ACKS_LATE (`1`: `task_acks_late = True`, what Celery's FAQ
suggests for reliability; otherwise Celery's default, acknowledging as a task starts).

As a script, `celery_rabbit_worker.py AMQP_URL QUEUE N COMMAND` sends N tasks through Celery's
own producer and removes the exchange Celery declared beside the queue once they are sent.
"""
import os
import sys
import time

from celery import Celery

TASK = "proj.tasks.work"


def app_on(url, queue):
    app = Celery("proj", broker=url.replace("amqp://", "pyamqp://", 1))
    app.conf.task_default_queue = queue
    return app


if __name__ == "__main__":
    url, queue, n, command = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    producer = app_on(url, queue)
    for _ in range(n):
        producer.send_task(TASK, args=[command])
    with producer.connection_for_write() as conn:
        conn.default_channel.exchange_delete(queue)
    sys.exit(0)

app = app_on(os.environ["QHOST_E2E_AMQP"], os.environ["QHOST_E2E_QUEUE"])
app.conf.task_acks_late = os.environ.get("QHOST_E2E_ACKS_LATE") == "1"
EFFECTS = os.environ["QHOST_E2E_OUT"]


@app.task(name=TASK)
def work(command):
    for step in command.split(";"):
        verb, _, arg = step.partition(":")
        if verb == "sleep":
            time.sleep(int(arg) / 1000)
        elif verb == "echo":
            fd = os.open(EFFECTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (work.request.id + "\n").encode())
            finally:
                os.close(fd)
