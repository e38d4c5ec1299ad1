"""The Celery side of `cargo bench -p qhost-e2e --bench celery`: the Celery app a team runs today
on kombu's SQS transport, with the best duplicate suppression Celery has there
(`worker_deduplicate_successful_tasks`, which needs late acks and a persistent result backend),
and the trivial task every row of the bench runs.

As a worker's app (`python -m celery -A celery_bench worker ...`), it reads its server, queue,
result backend and runs file from QHOST_BENCH_SQS, QHOST_BENCH_QUEUE, QHOST_BENCH_REDIS and
QHOST_BENCH_RUNS; the task appends its id to the runs file, so the bench counts how often each
task ran.

As a script, `celery_bench.py ENDPOINT QUEUE N` sends N of the task through Celery's own
producer (`send_task`, as `delay()` sends), the messages every row then consumes.
"""
import os
import sys

from celery_app import app_for

TASK = "proj.tasks.noop"

if __name__ == "__main__":
    endpoint, queue, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    app = app_for(endpoint, queue)
    for _ in range(n):
        app.send_task(TASK, args=["ack"])
    sys.exit(0)

app = app_for(
    os.environ["QHOST_BENCH_SQS"],
    os.environ["QHOST_BENCH_QUEUE"],
    os.environ["QHOST_BENCH_REDIS"],
    wait_time_seconds=1,
    polling_interval=0.1,
)
app.conf.task_acks_late = True
app.conf.worker_deduplicate_successful_tasks = True
RUNS = os.environ["QHOST_BENCH_RUNS"]


@app.task(name=TASK)
def noop(command):
    """The trivial task: notes that it ran (one short append, atomic under O_APPEND)."""
    fd = os.open(RUNS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (noop.request.id + "\n").encode())
    finally:
        os.close(fd)
