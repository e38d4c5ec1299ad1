//! A checked component, ready to instantiate, in one of the two shapes a handler takes: a
//! handler (`handle`, one message per call) or a batch handler (`handle-batch`). Loading finds
//! which; calls go through [`Exports`], which hides the difference from the invoker.

use anyhow::Context as _;
use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::bindings::batch::{BatchHandler, BatchHandlerPre};
use super::bindings::qhost::handler::types::{Message, Outcome};
use super::bindings::{Handler, HandlerPre};
use super::state::HostState;

/// A component's pre-instantiation, by shape.
#[derive(Clone)]
pub enum Pre {
    /// Exports `handle`.
    One(HandlerPre<HostState>),
    /// Exports `handle-batch`.
    Batch(BatchHandlerPre<HostState>),
}

/// An instance's exports, by shape.
pub enum Exports {
    /// `handle`.
    One(Handler),
    /// `handle-batch`.
    Batch(BatchHandler),
}

impl Pre {
    /// The shape `pre` exports, or why it exports neither.
    pub fn new(pre: InstancePre<HostState>) -> anyhow::Result<Pre> {
        let one = HandlerPre::new(pre.clone());
        if let Ok(one) = one {
            return Ok(Pre::One(one));
        }
        match BatchHandlerPre::new(pre) {
            Ok(batch) => Ok(Pre::Batch(batch)),
            Err(_) => one.map(Pre::One).map_err(anyhow::Error::from).context(
                "it does not export the qhost:handler world (`handle`, or `handle-batch` for a batch handler)",
            ),
        }
    }

    /// Whether it is a batch handler.
    pub fn is_batch(&self) -> bool {
        matches!(self, Pre::Batch(_))
    }

    /// Its engine.
    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            Pre::One(pre) => pre.engine(),
            Pre::Batch(pre) => pre.engine(),
        }
    }

    /// A new instance in `store`.
    pub async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Exports> {
        match self {
            Pre::One(pre) => pre.instantiate_async(store).await.map(Exports::One),
            Pre::Batch(pre) => pre.instantiate_async(store).await.map(Exports::Batch),
        }
    }
}

impl Exports {
    /// Calls the handler with `messages` (one, for a `handle` export): one outcome per message
    /// the guest returned, however many that is.
    pub async fn call(
        &self,
        store: &mut Store<HostState>,
        messages: &[Message],
    ) -> wasmtime::Result<Vec<Outcome>> {
        match self {
            Exports::One(handler) => {
                let [message] = messages else {
                    let n = messages.len();
                    let e = format!("a handler of one message was called with {n}");
                    return Err(wasmtime::Error::msg(e));
                };
                Ok(vec![handler.call_handle(store, message).await?])
            }
            Exports::Batch(handler) => handler.call_handle_batch(store, messages).await,
        }
    }
}

impl std::fmt::Debug for Pre {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_batch() {
            "Pre::Batch"
        } else {
            "Pre::One"
        })
    }
}

impl std::fmt::Debug for Exports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Exports::One(_) => "Exports::One",
            Exports::Batch(_) => "Exports::Batch",
        })
    }
}
