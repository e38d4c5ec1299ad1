// email-reminder, in JavaScript: one email per reminder, however often the reminder is
// delivered.
//
// The host holds a lease on the reminder's id (see qhost.toml) before this runs and remembers
// the key once it acks, so the handler does no duplicate checking of its own. The email goes
// out through the outbox, which the host sends once, with the idempotency key as its
// Message-Id.
//
// What the key cannot catch, two reminder ids for one address and month, the handler catches
// with state: the `reminded` bucket its manifest grants (wasi:keyvalue) records each
// address-month it reminded, committed with the run that sent the email. Without the grant it
// relies on the key.
//
// On a Celery queue (format = "celery") the reminder is the task's keyword arguments
// (send_reminder.delay(email=…, customer=…, month=…)), one email per task id, and the task
// returns the email's id to a caller waiting on its result.
//
// Build: scripts/build-guest-plugins (componentize-js, pinned by package-lock.json, against
// ../../wit's `handler-state` world).

import { get } from "qhost:handler/config@0.1.2";
import { write } from "qhost:handler/log@0.1.2";
import { send } from "qhost:handler/outbox@0.1.2";
import { set as setResult } from "qhost:handler/result-value@0.1.2";
import { open } from "wasi:keyvalue/store@0.2.0-draft";

const text = new TextDecoder();
const bytes = new TextEncoder();

export function handle(msg) {
  // On a Celery queue the host gives the decoded task, marked by its `celery-task` attribute.
  const celery = msg.attributes.some((a) => a.name === "celery-task");
  let reminder;
  try {
    const body = JSON.parse(text.decode(msg.body));
    reminder = celery ? body.kwargs : body;
  } catch (e) {
    return { tag: "reject", val: `not a reminder: ${e.message}` };
  }
  // Not a JSON object: a bug upstream. The TypeError traps, the host retries, and after
  // max-attempts dead-letters the message with the exception text.
  const { email, customer, month } = reminder;
  if (!email.includes("@")) {
    return { tag: "reject", val: `invalid address ${JSON.stringify(email)}` };
  }
  if (msg.receiveCount <= (reminder["outage-attempts"] ?? 0)) {
    write("warn", "email API unavailable; asking for a retry");
    return { tag: "retry", val: 1 };
  }
  const reminded = remindedBucket();
  const seen = `${email.toLowerCase()}/${month}`;
  if (reminded !== null && reminded.exists(seen)) {
    write("info", `${email} was reminded for ${month} already; not sending again`);
    return { tag: "ack" };
  }
  const messageId = `<${msg.idempotencyKey}@reminders.qhost>`;
  const emailJson = {
    "message-id": messageId,
    to: email,
    subject: `Your ${month} reminder`,
    body: `Hello ${customer}, this is your reminder for ${month}.`,
    "fencing-token": Number(msg.fencingToken),
  };
  try {
    send({
      queue: get("sent-queue") ?? "sent-emails",
      body: bytes.encode(JSON.stringify(emailJson)),
      attributes: [{ name: "to", value: { tag: "string", val: email } }],
      delaySeconds: 0,
      groupId: undefined,
    });
  } catch (e) {
    write("error", `could not queue the email: ${e.payload ?? e}`);
    return { tag: "retry", val: 5 };
  }
  reminded?.set(seen, bytes.encode(msg.idempotencyKey));
  write("info", `reminder for ${email} queued as ${messageId}`);
  if (celery) {
    // What the task returns: a caller's AsyncResult(id).get() gets it.
    setResult(JSON.stringify({ "message-id": messageId }));
  }
  return { tag: "ack" };
}

// The `reminded` bucket, or null when the manifest grants no such bucket.
function remindedBucket() {
  try {
    return open("reminded");
  } catch (e) {
    if (e.payload?.tag === "access-denied") {
      return null;
    }
    throw e;
  }
}
