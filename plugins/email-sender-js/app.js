// email-sender, in JavaScript: sends a reminder email once by calling an email API with fetch.
//
// The host holds a lease on the reminder's id (see qhost.toml) before this runs, and puts
// `Idempotency-Key: email-sender-js:REMINDER-ID/http/0` on the request: the same key on every
// re-run of the reminder (a duplicate delivery, a retry, a host that crashed mid-call), so an
// API that honours the header sends one email. The handler does no duplicate checking of its
// own. `fetch` reaches only the origins the manifest grants; anything else rejects its promise
// with the host's refusal.
//
// `handle` is async: componentize-js runs the event loop until its promise settles, so the
// host sees an ordinary call, bounded by the plugin's timeout-ms.
//
// Build: scripts/build-guest-plugins (componentize-js, pinned by ../email-reminder-js's
// package-lock.json, against ../../wit, with HTTP enabled).

import { get } from "qhost:handler/config@0.1.2";
import { write } from "qhost:handler/log@0.1.2";

const text = new TextDecoder();

export async function handle(msg) {
  let reminder;
  try {
    reminder = JSON.parse(text.decode(msg.body));
  } catch (e) {
    return { tag: "reject", val: `not a reminder: ${e.message}` };
  }
  const { email, customer, month } = reminder ?? {};
  if (typeof email !== "string" || !email.includes("@")) {
    return { tag: "reject", val: `invalid address ${JSON.stringify(email)}` };
  }
  const url = get("api-url");
  const key = get("api-key");
  if (!url || !key) {
    return { tag: "reject", val: "the manifest sets no api-url or api-key" };
  }
  let response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({
        personalizations: [{ to: [{ email }] }],
        from: { email: get("from") ?? "reminders@example.com" },
        subject: `Your ${month} reminder`,
        content: [
          { type: "text/plain", value: `Hello ${customer}, this is your reminder for ${month}.` },
        ],
      }),
    });
  } catch (e) {
    write("warn", `email API unreachable: ${e}`);
    return { tag: "retry", val: 5 };
  }
  if (response.ok) {
    write("info", `reminder for ${email} accepted by the email API`);
    return { tag: "ack" };
  }
  if (response.status === 429 || response.status >= 500) {
    const wait = Math.min(Number(response.headers.get("retry-after")) || 5, 3600);
    write("warn", `email API answered ${response.status}; retrying in ${wait} s`);
    return { tag: "retry", val: wait };
  }
  return { tag: "reject", val: `email API answered ${response.status}: ${await response.text()}` };
}
