"""email-sender, in Python: sends a reminder email once by calling an email API.

Built against the `handler-http` world (the handler world plus wasi:http's outgoing handler);
`qhost_http.py` beside it is a small blocking client on those bindings. The host holds a lease
on the reminder's id (see qhost.toml) while this runs, and puts
`Idempotency-Key: email-sender-py:REMINDER-ID/http/0` on the request: the same key on every
re-run of the reminder, so an API that honours the header sends one email. The handler does
no duplicate checking of its own.

Build: scripts/build-guest-plugins (componentize-py, pinned, against ../../wit, world
handler-http).
"""

import json

import qhost_http
import wit_world
from wit_world.imports import config, log
from wit_world.imports.qhost_handler_types import (
    Message,
    Outcome_Ack,
    Outcome_Reject,
    Outcome_Retry,
)


class WitWorld(wit_world.WitWorld):
    def handle(self, msg: Message):
        try:
            reminder = json.loads(msg.body)
            email, customer, month = reminder["email"], reminder["customer"], reminder["month"]
        except (ValueError, KeyError, TypeError) as e:
            return Outcome_Reject(f"not a reminder: {e!r}")
        if "@" not in email:
            return Outcome_Reject(f"invalid address {email!r}")
        url, key = config.get("api-url"), config.get("api-key")
        if not url or not key:
            return Outcome_Reject("the manifest sets no api-url or api-key")
        payload = {
            "personalizations": [{"to": [{"email": email}]}],
            "from": {"email": config.get("from") or "reminders@example.com"},
            "subject": f"Your {month} reminder",
            "content": [
                {
                    "type": "text/plain",
                    "value": f"Hello {customer}, this is your reminder for {month}.",
                }
            ],
        }
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        try:
            status, response_headers, body = qhost_http.request(
                "POST", url, headers, json.dumps(payload).encode()
            )
        except qhost_http.HttpError as e:
            if e.refused:
                return Outcome_Reject(f"the host refused the call: {e}")
            log.write(log.Level.WARN, f"email API unreachable: {e}")
            return Outcome_Retry(5)
        if 200 <= status < 300:
            log.write(log.Level.INFO, f"reminder for {email} accepted by the email API")
            return Outcome_Ack()
        if status == 429 or status >= 500:
            wait = dict(response_headers).get("retry-after", b"5").decode()
            wait = min(int(wait), 3600) if wait.isdigit() else 5
            log.write(log.Level.WARN, f"email API answered {status}; retrying in {wait} s")
            return Outcome_Retry(wait)
        return Outcome_Reject(f"email API answered {status}: {body.decode(errors='replace')}")
