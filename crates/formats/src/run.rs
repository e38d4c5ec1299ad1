//! A run: one piece of work a message holds, with where it goes, what keys it, what the
//! handler sees and whether it runs now.

use std::sync::Arc;
use std::time::Duration;

use qhost_message::{Attribute, Received};

use crate::effects::Effects;
use crate::route::Route;

/// One run a message holds: routed, keyed and leased on its own.
#[derive(Debug)]
pub struct Run {
    /// Where it goes.
    pub route: Route,
    /// What its key is derived from.
    pub key: KeyBasis,
    /// What the handler is given; `None`: the message's own body and attributes.
    pub view: Option<View>,
    /// A deadline lower than the plugin's, from the message (a Celery task's time limit).
    pub time_limit: Option<Duration>,
    /// Whether it runs now.
    pub admit: Admit,
    /// What commits with its completion besides the handler's outbox.
    pub effects: Option<Arc<dyn Effects>>,
}

impl Run {
    /// A run of the message as it is, by `route` and `key`, admitted now, with no effects.
    pub fn plain(route: Route, key: KeyBasis, view: Option<View>) -> Run {
        Run {
            route,
            key,
            view,
            time_limit: None,
            admit: Admit::Now,
            effects: None,
        }
    }

    /// What the handler is given: the run's view, or the message's own body and attributes.
    pub fn view_of(&self, msg: &Received) -> (Vec<u8>, Vec<Attribute>) {
        match &self.view {
            Some(view) => (view.body.clone(), view.attributes.clone()),
            None => (msg.body.clone(), msg.attributes.clone()),
        }
    }
}

/// What a run's idempotency key is derived from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyBasis {
    /// The message as received: the plugin's key source reads its id, body and attributes.
    Message,
    /// The id the producer retries with, in place of the queue's message id: a plugin keyed by
    /// `message-id` (the default) is keyed by it; other key sources read the run's view.
    Id(String),
    /// This key, whatever the plugin's key source (a Celery task id: what makes two
    /// deliveries the same task).
    Fixed(String),
}

/// What a handler is given in place of the message's own body and attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The body.
    pub body: Vec<u8>,
    /// The attributes.
    pub attributes: Vec<Attribute>,
}

/// Whether a run may run now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admit {
    /// It may.
    Now,
    /// Not yet: put back hidden for `wait`, using no attempt (a Celery task's eta).
    NotDue {
        /// The due time as the message wrote it.
        eta: String,
        /// How long to hide it.
        wait: Duration,
    },
    /// Never: acked without running (a Celery task past its expiry).
    Expired {
        /// The expiry as the message wrote it.
        expires: String,
    },
    /// Refused with this reason, once its route is known (a Celery task whose callbacks
    /// qhost will not send): dead-lettered.
    Refused(String),
}
