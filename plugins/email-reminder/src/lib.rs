//! The classic case for qhost: a monthly reminder email that must go out once.
//!
//! The body is JSON: `{"reminder-id": "...", "email": "...", "customer": "...", "month": "..."}`.
//! The handler "sends" the email by putting it in the outbox for the `sent-emails` queue (the
//! `sent-queue` setting), using the idempotency key as the email's Message-Id, which is what a
//! real email API would deduplicate on. It never checks whether it already sent this reminder:
//! the host guarantees it runs once per reminder while the key is remembered.
//!
//! What the key cannot catch is a producer that sends the same month's reminder twice under
//! two reminder ids. For that the handler keeps state: in the `reminded` bucket (granted in its
//! manifest) it records each address-month it reminded, and a second reminder for the same
//! address and month sends nothing. The record is committed with the run that sent the email,
//! so the check and the send cannot race or half-happen. Without the grant it relies on the key
//! alone.
//!
//! On a Celery queue (`format = "celery"`) the reminder is the task's keyword arguments
//! (`send_reminder.delay(email=…, customer=…, month=…)`), one email per task id, and the task
//! returns the email's id to a caller waiting on its result.
//!
//! For the demo, `"outage-attempts": N` makes the pretend email API fail the first N deliveries.

use qhost_guest::outbox::Outgoing;
use qhost_guest::state::{self, Bucket};
use qhost_guest::{Attribute, Handler, Message, Outcome, celery, config, log};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Reminder {
    email: String,
    customer: String,
    month: String,
    #[serde(default)]
    outage_attempts: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Email<'a> {
    message_id: String,
    to: &'a str,
    subject: String,
    body: String,
    fencing_token: u64,
}

struct EmailReminder;

impl Handler for EmailReminder {
    fn handle(msg: Message) -> Outcome {
        let celery = msg.attributes.iter().any(|a| a.name == "celery-task");
        let reminder = match reminder_of(&msg, celery) {
            Ok(r) => r,
            Err(e) => return Outcome::reject(format!("not a reminder: {e}")),
        };
        if !reminder.email.contains('@') {
            return Outcome::reject(format!("invalid address {:?}", reminder.email));
        }
        if msg.receive_count <= reminder.outage_attempts {
            log::warn("email API unavailable; asking for a retry");
            return Outcome::Retry(1);
        }
        let reminded = match Reminded::open(&reminder) {
            Ok(reminded) => reminded,
            Err(e) => return Outcome::Retry(retry_seconds(&e.to_string())),
        };
        match reminded.before() {
            Ok(Some(by)) => {
                log::info(&format!(
                    "{} was reminded for {} already (by {by}); not sending again",
                    reminder.email, reminder.month
                ));
                return Outcome::Ack;
            }
            Ok(None) => {}
            Err(e) => return Outcome::Retry(retry_seconds(&e.to_string())),
        }
        let sent = send_email(&msg, &reminder).and_then(|id| {
            reminded.record(&msg)?;
            match celery {
                // What the task returns: a caller's AsyncResult(id).get() gets it.
                true => celery::set_result(&serde_json::json!({ "message-id": id })),
                false => Ok(()),
            }
        });
        match sent {
            Ok(()) => Outcome::Ack,
            Err(e) => Outcome::Retry(retry_seconds(&e)),
        }
    }
}

/// The reminder: the body, or on a Celery queue the task's keyword arguments.
fn reminder_of(msg: &Message, celery: bool) -> Result<Reminder, String> {
    if celery {
        let task = celery::Task::of(msg)?;
        return serde_json::from_value(celery::Value::Object(task.kwargs))
            .map_err(|e| e.to_string());
    }
    serde_json::from_slice(&msg.body).map_err(|e| match e.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            "the body is not JSON; a reminder is an object with reminder-id, email, customer and month"
                .to_string()
        }
        _ => e.to_string(),
    })
}

/// The address-months reminded so far, when the manifest grants the `reminded` bucket.
struct Reminded {
    bucket: Option<Bucket>,
    key: String,
}

impl Reminded {
    fn open(reminder: &Reminder) -> Result<Self, state::Error> {
        let key = format!("{}/{}", reminder.email.to_lowercase(), reminder.month);
        let bucket = match Bucket::open("reminded") {
            Ok(bucket) => Some(bucket),
            Err(state::Error::NotGranted(_)) => None,
            Err(e) => return Err(e),
        };
        Ok(Reminded { bucket, key })
    }

    /// The reminder that reminded this address this month, if one did.
    fn before(&self) -> Result<Option<String>, state::Error> {
        match &self.bucket {
            Some(bucket) => bucket.get_text(&self.key),
            None => Ok(None),
        }
    }

    /// Records this run's reminder, committed with it.
    fn record(&self, msg: &Message) -> Result<(), String> {
        match &self.bucket {
            Some(bucket) => bucket
                .set(&self.key, &msg.idempotency_key)
                .map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

/// Queues the email; returns its Message-Id.
fn send_email(msg: &Message, reminder: &Reminder) -> Result<String, String> {
    let email = Email {
        message_id: format!("<{}@reminders.qhost>", msg.idempotency_key),
        to: &reminder.email,
        subject: format!("Your {} reminder", reminder.month),
        body: format!(
            "Hello {}, this is your reminder for {}.",
            reminder.customer, reminder.month
        ),
        fencing_token: msg.fencing_token,
    };
    let queue = config::get("sent-queue").unwrap_or_else(|| "sent-emails".to_string());
    let body = serde_json::to_vec(&email).map_err(|e| e.to_string())?;
    Outgoing::new(queue, body)
        .with_attribute(Attribute::string("to", &reminder.email))
        .send()?;
    log::info(&format!(
        "reminder for {} queued as {}",
        reminder.email, email.message_id
    ));
    Ok(email.message_id)
}

fn retry_seconds(error: &str) -> u32 {
    log::error(&format!("could not queue the email: {error}"));
    5
}

qhost_guest::export!(EmailReminder);
