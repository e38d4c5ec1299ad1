//! qhost's own format: the body as it is. The key is derived from the message as received, and
//! the route is the default plugin, or the plugin the queue's route attribute names (one of the
//! queue's routes, never another: a message cannot choose a plugin the queue does not list).

use crate::{Format, KeyBasis, Route, Run, Unreadable};
use qhost_message::{Attribute, Received, find_attribute};

/// The bare-body format, with the queue's route attribute.
#[derive(Debug)]
pub(crate) struct Qhost {
    route_attribute: Option<String>,
}

impl Qhost {
    /// The format of a queue whose messages may choose a route through `route_attribute`.
    pub(crate) fn new(route_attribute: Option<String>) -> Qhost {
        Qhost { route_attribute }
    }
}

impl Format for Qhost {
    fn read(
        &self,
        _: &Received,
        _: &[u8],
        attributes: &[Attribute],
    ) -> Result<Vec<Run>, Unreadable> {
        let chosen = (self.route_attribute.as_ref()).and_then(|attribute| {
            let value = find_attribute(attributes, attribute).and_then(Attribute::text)?;
            Some(Route::Chosen {
                attribute: attribute.clone(),
                value: value.to_string(),
            })
        });
        let route = chosen.unwrap_or(Route::Default);
        Ok(vec![Run::plain(route, KeyBasis::Message, None)])
    }

    fn reads_body(&self) -> bool {
        false
    }
}
