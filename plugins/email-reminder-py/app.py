"""email-reminder, in Python: one email per reminder, however often the reminder is delivered.

The host holds a lease on the reminder's id (see qhost.toml) before this runs and remembers the
key once it acks, so the handler does no duplicate checking of its own. The email goes out
through the outbox, which the host sends once, with the idempotency key as its Message-Id.

What the key cannot catch, two reminder ids for one address and month, the handler catches with
state: the `reminded` bucket its manifest grants (wasi:keyvalue) records each address-month it
reminded, committed with the run that sent the email. Without the grant it relies on the key.

Build: scripts/build-guest-plugins (componentize-py, pinned, against ../../wit's
`handler-full` world, with ../../guest-sdk/python on its path for qhost_celery): the world
and the module names of a `qhost new python` project, so this file can be copied into one.
"""

import json

import qhost_celery
import wit_world
from componentize_py_types import Err
from wit_world.imports import config, log, outbox, store
from wit_world.imports.qhost_handler_types import (
    Attribute,
    AttributeValue_String,
    Message,
    Outcome_Ack,
    Outcome_Reject,
    Outcome_Retry,
)


class WitWorld(wit_world.WitWorld):
    def handle(self, msg: Message):
        # On a Celery queue (format = "celery") the body is the task the host decoded, and the
        # reminder is its keyword arguments: send_reminder.delay(email=…, customer=…, month=…).
        task = qhost_celery.Task.of(msg)
        try:
            reminder = task.kwargs if task is not None else json.loads(msg.body)
        except ValueError as e:
            return Outcome_Reject(f"not a reminder: {e}")
        # Not a JSON object: a bug upstream. The exception traps, the host retries, and after
        # max-attempts dead-letters the message with this traceback.
        email, customer, month = reminder["email"], reminder["customer"], reminder["month"]
        if "@" not in email:
            return Outcome_Reject(f"invalid address {email!r}")
        if msg.receive_count <= reminder.get("outage-attempts", 0):
            log.write(log.Level.WARN, "email API unavailable; asking for a retry")
            return Outcome_Retry(1)
        reminded, seen = reminded_bucket(), f"{email.lower()}/{month}"
        if reminded is not None and reminded.exists(seen):
            log.write(log.Level.INFO, f"{email} was reminded for {month} already; not sending again")
            return Outcome_Ack()
        message_id = f"<{msg.idempotency_key}@reminders.qhost>"
        email_json = {
            "message-id": message_id,
            "to": email,
            "subject": f"Your {month} reminder",
            "body": f"Hello {customer}, this is your reminder for {month}.",
            "fencing-token": msg.fencing_token,
        }
        queue = config.get("sent-queue") or "sent-emails"
        to = Attribute("to", AttributeValue_String(email))
        try:
            outbox.send(outbox.Outgoing(queue, json.dumps(email_json).encode(), [to], 0, None))
        except Err as e:
            log.write(log.Level.ERROR, f"could not queue the email: {e.value}")
            return Outcome_Retry(5)
        if reminded is not None:
            reminded.set(seen, msg.idempotency_key.encode())
        log.write(log.Level.INFO, f"reminder for {email} queued as {message_id}")
        if task is not None:
            # What the task returns: a caller's AsyncResult(id).get() gets it.
            qhost_celery.set_result({"message-id": message_id})
        return Outcome_Ack()


def reminded_bucket():
    """The `reminded` bucket, or None when the manifest grants no such bucket."""
    try:
        return store.open("reminded")
    except Err as e:
        if isinstance(e.value, store.Error_AccessDenied):
            return None
        raise
