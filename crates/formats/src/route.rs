//! Where a run goes: the route a format reads from a message, looked up in its queue's
//! routing table. A message can only reach a plugin the table (or its default) names.

use std::collections::BTreeMap;

/// A queue's routing table: which plugin runs each route, and the default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    /// The plugin of each route name.
    pub table: BTreeMap<String, String>,
    /// The plugin of a message with no route, or (outside qhost's own format) a route not in
    /// the table; without one, such a message is dead-lettered.
    pub default: Option<String>,
}

impl Routes {
    /// The plugin for the first of `names` the table holds.
    pub fn lookup<'a>(&'a self, names: &[String]) -> Option<&'a str> {
        (names.iter()).find_map(|name| self.table.get(name).map(String::as_str))
    }

    /// The route names, for an error that lists them.
    pub fn names(&self) -> String {
        self.table.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// Where a run goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// The queue's default plugin.
    Default,
    /// The first of `names` that the queue's table routes; none of them: the default plugin,
    /// or (without one) a dead letter naming `names[0]` as a `noun`.
    Named {
        /// The names to look up, in order (a topic's ARN, then its name).
        names: Vec<String>,
        /// What a name is, for the dead letter's reason (`task`, `topic`, …).
        noun: &'static str,
        /// The table's field as the format spells it (`tasks` for Celery, `routes` otherwise).
        table: &'static str,
    },
    /// A plugin the message itself chose through the queue's route attribute: one of the
    /// table's routes, or a dead letter; never the default instead.
    Chosen {
        /// The route attribute.
        attribute: String,
        /// What the message put there.
        value: String,
    },
}

impl Route {
    /// The plugin this route runs on in a queue routed by `routes`, whose plugin is
    /// `queue_plugin`: one of the queue's routes, or its default. A message never reaches a
    /// plugin the queue does not list.
    pub fn plugin<'a>(
        &self,
        routes: &'a Routes,
        queue_plugin: &'a str,
    ) -> Result<&'a str, Unrouted> {
        let default = routes.default.as_deref();
        match self {
            Route::Default => Ok(default.unwrap_or(queue_plugin)),
            Route::Named { names, noun, table } => {
                (routes.lookup(names).or(default)).ok_or_else(|| Unrouted::Unknown {
                    noun,
                    name: names.first().cloned().unwrap_or_default(),
                    table,
                    routes: routes.names(),
                })
            }
            Route::Chosen { value, .. } if default == Some(value.as_str()) => Ok(queue_plugin),
            Route::Chosen { attribute, value } => (routes.table.get(value).map(String::as_str))
                .ok_or_else(|| Unrouted::NotARoute {
                    attribute: attribute.clone(),
                    value: value.clone(),
                    routes: routes.names(),
                }),
        }
    }
}

/// Why a run's route names no plugin of its queue: the message is dead-lettered with this.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unrouted {
    /// A route the queue's table does not hold, with no default plugin.
    #[error(
        "{noun} `{name}` is not one this queue routes ({table}: {routes}) and it has no default plugin"
    )]
    Unknown {
        /// What a route is in this format.
        noun: &'static str,
        /// The route the message named.
        name: String,
        /// The routing table's field, as the format spells it.
        table: &'static str,
        /// The names the queue routes.
        routes: String,
    },
    /// The route attribute names a plugin the queue does not route to.
    #[error(
        "route attribute `{attribute}` holds `{value}`, which is not one of this queue's routes ({routes})"
    )]
    NotARoute {
        /// The queue's route attribute.
        attribute: String,
        /// What the message put there.
        value: String,
        /// The plugins it may name.
        routes: String,
    },
}
