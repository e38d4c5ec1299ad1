"""Celery tasks for qhost handlers written in Python (built with componentize-py).

On a queue with `format = "celery"` the host decodes Celery's message before the handler runs
and gives it the task as a JSON body, with a `celery-task` attribute; `Task.of(msg)` reads it
(None on any other queue). What the task returns, `set_result(value)` gives the host: a Celery
caller's `AsyncResult.get()` returns it, and so do the task's callbacks and chain get it first
in their arguments. It is kept only if the handler acks.

    task = qhost_celery.Task.of(msg)
    if task is not None:
        customer, month = task.kwargs["customer"], task.kwargs["month"]
        ...
        qhost_celery.set_result({"sent": 1})

A `qhost new python` project carries this file beside `app.py`, and its build (in the
project's README) bundles it. Elsewhere, put this folder on componentize-py's path beside your
app's: `componentize-py -d QHOST/wit -w handler-full componentize -p . -p QHOST/guest-sdk/python app -o app.wasm`.
"""
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from componentize_py_types import Err
from wit_world.imports import result_value


@dataclass
class Task:
    """A Celery task as the host hands it over. Values Celery's JSON tags (datetimes, decimals,
    UUIDs) arrive as the strings kombu wrote."""

    task: str
    id: str
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    retries: int = 0
    eta: Optional[str] = None
    expires: Optional[str] = None
    root_id: Optional[str] = None
    parent_id: Optional[str] = None
    group: Optional[str] = None

    @staticmethod
    def of(msg) -> Optional["Task"]:
        """The task `msg` carries, or None when it did not come from a Celery queue."""
        if not any(a.name == "celery-task" for a in msg.attributes):
            return None
        body = json.loads(msg.body)
        known = {k: body[k] for k in Task.__dataclass_fields__ if k in body}
        return Task(**known)


def set_result(value: Any) -> None:
    """Sets what the task returns (any JSON-serialisable value). Raises ValueError when the host
    refuses it (larger than 512 KiB)."""
    try:
        result_value.set(json.dumps(value))
    except Err as e:
        raise ValueError(e.value) from None
