//! The classic case for qhost, end to end: a monthly reminder email that must go out once,
//! sent by calling an email API from the handler.
//!
//! The body is JSON: `{"reminder-id": "...", "email": "...", "customer": "...", "month": "..."}`.
//! The handler POSTs a SendGrid-shaped message to the `api-url` setting with the `api-key`
//! secret. It does no duplicate checking of its own, and does not make an idempotency key
//! either: the host holds a lease on the reminder's id while this runs, and puts
//! `Idempotency-Key: email-sender:REMINDER-ID/http/0` on the request, the same on every re-run
//! of the reminder (a duplicate delivery, a retry after a 503, a host that crashed mid-call).
//! An API that honours the header sends one email.
//!
//! Outcomes follow the API's answer: 2xx acks; 429 and 5xx retry (after `Retry-After` if the
//! API gives one); any other status rejects (the request itself is wrong, and sending it again
//! will not help); a network failure retries; a refusal by the host (the URL is not granted)
//! rejects with the reason.

use qhost_guest::http::{Request, Response};
use qhost_guest::{Handler, Message, Outcome, config, log};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Reminder {
    email: String,
    customer: String,
    month: String,
}

struct EmailSender;

impl Handler for EmailSender {
    fn handle(msg: Message) -> Outcome {
        let reminder: Reminder = match serde_json::from_slice(&msg.body) {
            Ok(r) => r,
            Err(e) => return Outcome::reject(format!("not a reminder: {e}")),
        };
        if !reminder.email.contains('@') {
            return Outcome::reject(format!("invalid address {:?}", reminder.email));
        }
        let (Some(url), Some(key)) = (config::get("api-url"), config::get("api-key")) else {
            return Outcome::reject("the manifest sets no api-url or api-key");
        };
        let from = config::get("from").unwrap_or_else(|| "reminders@example.com".into());
        let payload = json!({
            "personalizations": [{ "to": [{ "email": reminder.email }] }],
            "from": { "email": from },
            "subject": format!("Your {} reminder", reminder.month),
            "content": [{
                "type": "text/plain",
                "value": format!("Hello {}, this is your reminder for {}.", reminder.customer, reminder.month),
            }],
        });
        let sent = Request::post(&url)
            .header("authorization", &format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(payload.to_string())
            .send();
        match sent {
            Ok(response) => by_status(&response, &reminder.email),
            Err(e) if e.is_refused() => Outcome::reject(format!("the host refused the call: {e}")),
            Err(e) => {
                log::warn(&format!("email API unreachable: {e}"));
                Outcome::Retry(5)
            }
        }
    }
}

fn by_status(response: &Response, to: &str) -> Outcome {
    match response.status {
        200..=299 => {
            log::info(&format!("reminder for {to} accepted by the email API"));
            Outcome::Ack
        }
        429 | 500..=599 => {
            let wait = retry_after(response).unwrap_or(5);
            log::warn(&format!(
                "email API answered {}; retrying in {wait} s",
                response.status
            ));
            Outcome::Retry(wait)
        }
        status => Outcome::reject(format!(
            "email API answered {status}: {}",
            String::from_utf8_lossy(&response.body)
        )),
    }
}

/// `Retry-After` in seconds, if the API sent one (capped at an hour).
fn retry_after(response: &Response) -> Option<u32> {
    response
        .headers
        .iter()
        .find(|(name, _)| name == "retry-after")
        .and_then(|(_, value)| std::str::from_utf8(value).ok()?.trim().parse().ok())
        .map(|secs: u32| secs.min(3600))
}

qhost_guest::export!(EmailSender);
